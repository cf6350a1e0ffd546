"""benchmarks/chaos_soak.py end to end, short: faults at random moments into one run that then reaches its budget."""
import subprocess
import sys

import pytest

from tests.integration.cluster import ROOT


@pytest.mark.integration
def test_a_short_soak_recovers_every_fault_and_the_run_reaches_its_budget():
    cmd = [sys.executable, "benchmarks/chaos_soak.py", "--minutes", "1", "--quiet-s", "30",
           "--faults", "kill-actor,ghost,greedy", "--gap-s", "2,4", "--first-after-s", "5", "--calibration-s", "10", "--seed", "1"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    assert "checkpoints lost: 0" in out and ", exit 0" in out, out[-1500:]
    injected = int(out.split("faults injected: ")[1].split()[0])
    assert injected >= 1 and f"recovered without a person: {injected} of {injected}" in out, out[-1500:]


def test_the_deck_deals_every_fault_once_before_any_again():
    import random

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from chaos_soak import shuffled_forever
    names = ["kill-actor", "stop-learner", "flood", "disk-full", "ghost"]
    deck = shuffled_forever(names, random.Random(3))
    dealt = [next(deck) for _ in range(4 * len(names))]
    for k in range(4):
        assert sorted(dealt[k * len(names):(k + 1) * len(names)]) == sorted(names)
    assert len({tuple(dealt[k * 5:(k + 1) * 5]) for k in range(4)}) > 1  # shuffled anew, not one order repeated
