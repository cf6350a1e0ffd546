"""An actor stops once: the first stop signal raises KeyboardInterrupt, any later one finds it leaving (actor's
actor.stop_signals). Each case runs in a fresh Python process, with real signals sent to itself."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration  # each case is a Python process of its own


def run(body: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent("""
        import os, signal
        from actor.stop_signals import leave_on_sigterm, leave_quietly
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal (background jobs start it ignored)

        def busy():  # Python work, during which a pending signal's handler runs
            return sum(range(10_000))
        """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("first, second", [("SIGHUP", "SIGTERM"), ("SIGINT", "SIGTERM"), ("SIGTERM", "SIGINT")])
def test_two_stop_signals_at_once_raise_one_keyboard_interrupt(first, second):
    """Both arrive before Python looks: one handler raises, the other runs in the except block, where the actor
    says goodbye. Before, it raised again there and the process ended on a traceback (the CI failure of
    test_kill_9_of_the_learner_leaves_no_collector: the learner's goodbye and the launcher's SIGTERM at once)."""
    done = run(f"""
        leave_on_sigterm()
        both = {{signal.{first}, signal.{second}}}
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, both)  # both pending before Python looks at either
            os.kill(os.getpid(), signal.{first})
            os.kill(os.getpid(), signal.{second})
            signal.pthread_sigmask(signal.SIG_UNBLOCK, both)
            busy()
        except KeyboardInterrupt as exc:
            busy()  # the goodbye
            print("left on", exc)
        """)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip() in (f"left on {first}", f"left on {second}", "left on")  # SIGINT: as Ctrl-C, no name


def test_a_stop_signal_while_leaving_is_no_news():
    """The actor leaves on the learner's goodbye; the supervisor's SIGTERM lands while it closes its envs and
    sockets (runner._leave): nothing is raised, the leaving goes on to its end."""
    done = run("""
        leave_on_sigterm()
        leave_quietly()
        os.kill(os.getpid(), signal.SIGTERM)
        busy()
        os.kill(os.getpid(), signal.SIGHUP)
        busy()
        print("closed")
        """)
    assert done.returncode == 0 and done.stdout.strip() == "closed", done.stderr


def test_a_stop_signal_before_leaving_still_interrupts_and_launch_children_keep_ignoring_ctrl_c():
    """The handlers are what they were before anyone leaves; where SIGINT is ignored (launch.py's children), it
    stays ignored."""
    done = run("""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        leave_on_sigterm()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
        busy()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            busy()
        except KeyboardInterrupt as exc:
            print("interrupted by", exc)
        """)
    assert done.returncode == 0 and done.stdout.strip() == "interrupted by SIGTERM", done.stderr
