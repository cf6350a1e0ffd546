"""Mutation spot-check (issue 11): apply realistic one-line bugs, one at a time, and see which the tests catch.

Each mutation (listed in benchmarks/mutations.toml) is an exact string replacement in one file of a temporary copy of the repository (the
working tree is never modified). The copy holds the working tree's tracked and untracked-but-not-ignored
files, so uncommitted edits are checked too. For every mutation the unit tests of tests/learner,
tests/protocol and tests/actor (plus, for a mutation only an integration test can see, that one test) run with `-x -q`
under a per-mutation timeout; a mutation is *caught* when
pytest fails, *survived* when it passes. Before anything runs, every selected mutation's target string is
looked for: one not found exactly once is reported as TARGET MISSING, naming the mutation, its file and the
string (the code moved: update the mutation), and the exit code is 2 without a test run; otherwise the exit
code is 0 whatever survives.

    python benchmarks/mutations.py                 # all mutations (~1 min each on 2 cores when survived)
    python benchmarks/mutations.py --only no-zero-grad greedy-argmin
    python benchmarks/mutations.py --list

Not part of CI: it runs the unit suite once per mutation.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNIT_TESTS = ["tests/learner", "tests/protocol", "tests/actor"]
TABLE = Path(__file__).with_suffix(".toml")  # the mutations, as data


@dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    path: str
    old: str
    new: str
    extra_tests: tuple[str, ...] = ()  # specific tests outside UNIT_TESTS (only where nothing cheaper can catch it)


def load(table: Path, kind: str) -> list[Mutation]:
    """The [[kind]] entries of `table`: each with name, what, path, old and new, and optionally tests."""
    entries = tomllib.loads(table.read_text()).get(kind, [])
    keys = {"name", "what", "path", "old", "new"}
    for i, e in enumerate(entries):
        if not keys <= set(e) <= keys | {"tests"}:
            raise SystemExit(f"{table.name}: [[{kind}]] {i + 1} has keys {sorted(e)}; wanted {sorted(keys)} (and tests)")
    return [Mutation(e["name"], e["what"], e["path"], e["old"], e["new"], tuple(e.get("tests", ()))) for e in entries]


MUTATIONS = load(TABLE, "mutation")
# Not among issue 11's ten: bugs that only an integration test can see (run with --extra; each costs the
# unit suite plus the named integration test).
EXTRA_MUTATIONS = load(TABLE, "extra")


def copy_tree(dest: Path) -> None:
    """The working tree's tracked and untracked-but-not-ignored files (no .venv, no runs, no caches)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.split(b"\0")
    for raw in listed:
        if not raw:
            continue
        rel = raw.decode()
        src = ROOT / rel
        if not src.is_file():  # deleted in the working tree but still in the index
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def run_tests(tree: Path, tests: list[str], timeout_s: float) -> tuple[str, float, str]:
    """('passed' | 'failed' | 'timeout', seconds, last lines of output)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=timeout_s,
                              start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return "timeout", time.monotonic() - t0, out[-800:]
    status = "passed" if proc.returncode == 0 else "failed"
    if proc.returncode not in (0, 1):  # 2-5: interrupted, internal error, usage error, nothing collected
        status = f"error (pytest exit {proc.returncode})"
    return status, time.monotonic() - t0, (proc.stdout + proc.stderr)[-800:]


def missing_targets(mutations: list[Mutation], root: Path) -> list[str]:
    """A line for each mutation whose target string is not found exactly once in its file under `root`."""
    lines = []
    for mut in mutations:
        path = root / mut.path
        count = path.read_text().count(mut.old) if path.is_file() else 0
        if count != 1:
            lines.append(f"{mut.name:28s} TARGET MISSING ({count} matches of {mut.old!r} in {mut.path})")
    return lines


def failing_test(output: str) -> str:
    for line in output.splitlines():
        if line.startswith("FAILED ") or line.startswith("ERROR "):
            return line.split(" ", 1)[1].split(" - ")[0]
    return "?"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="mutation names to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--extra", action="store_true", help="also the mutations only integration tests catch")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per mutation (a timeout counts as caught)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    args = parser.parse_args(argv)
    pool = MUTATIONS + (EXTRA_MUTATIONS if args.extra or args.list else [])
    if args.list:
        for mut in pool:
            print(f"{mut.name:28s} {mut.path:22s} {mut.what}")
        return 0
    if args.only:
        pool = MUTATIONS + EXTRA_MUTATIONS
    selected = [m for m in pool if not args.only or m.name in args.only]
    unknown = set(args.only or ()) - {m.name for m in pool}
    if unknown:
        parser.error(f"unknown mutations: {sorted(unknown)}")
    missing = missing_targets(selected, ROOT)
    if missing:
        print("\n".join(missing) + "\nthe code moved: update MUTATIONS", file=sys.stderr)
        return 2

    survivors, rows = [], []
    with tempfile.TemporaryDirectory(prefix="mutations-") as tmp:
        tree = Path(tmp) / "repo"
        copy_tree(tree)
        if not args.no_baseline:
            status, secs, out = run_tests(tree, UNIT_TESTS, args.timeout)
            print(f"baseline (no mutation): {status} in {secs:.0f}s", flush=True)
            if status != "passed":
                print(out)
                print("the unmutated tests do not pass: survivor counts would mean nothing")
                return 2
        for mut in selected:
            target = tree / mut.path
            original = target.read_text()
            target.write_text(original.replace(mut.old, mut.new))
            try:
                status, secs, out = run_tests(tree, [*UNIT_TESTS, *mut.extra_tests], args.timeout)
            finally:
                target.write_text(original)
            caught = status != "passed"
            if not caught:
                survivors.append(mut.name)
            detail = f"by {failing_test(out)}" if status == "failed" else status
            verdict = "caught  " if caught else "SURVIVED"
            print(f"{mut.name:28s} {verdict} {secs:5.0f}s  {mut.what}" + (f"  [{detail}]" if caught else ""),
                  flush=True)
            rows.append((mut.name, caught))
    print(f"\n{len(survivors)} of {len(rows)} mutations survived" + (f": {', '.join(survivors)}" if survivors else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
