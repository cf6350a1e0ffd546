"""launch.py's command line: the restart limits are counts, refused with one clear line otherwise."""
import pytest

from launcher.cli import build_parser


@pytest.mark.parametrize("flag", ["--max-restarts", "--max-learner-restarts"])
@pytest.mark.parametrize("value, words", [("-1", "-1 is negative: 0 means none"), ("two", "'two' is not a whole number")])
def test_a_restart_limit_that_is_not_a_count_is_refused_naming_it(flag, value, words, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([flag, value])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {words}" in err and err.count("error:") == 1


def test_zero_restarts_is_a_count():
    args = build_parser().parse_args(["--max-restarts", "0", "--max-learner-restarts", "0"])
    assert (args.max_restarts, args.max_learner_restarts) == (0, 0)
