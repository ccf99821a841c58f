"""What every test of a notebook's exercise checks (``notebooks/checks_NN.py``) asserts.

A check prints one verdict (``dltools.exercises.report``) and returns whether the answer is right,
as a ``Verdict`` (which a notebook does not display):
- a right answer: true, and ``Correct: ...``;
- a typical wrong answer: false, and ``Not yet: <hint>``, the hint naming the mistake;
- no answer (``None``): false, and ``Not answered yet: ...``;
- and the answer never shows in what Jupyter's help (``check?``) prints: signature and docstring.
"""
import inspect

from dltools.exercises import Verdict


def verdict(capsys, check, answer):
    """``(True or False, printed text)`` of ``check(answer)``, which returns a Verdict."""
    ok = check(answer)
    assert isinstance(ok, Verdict), f"{check.__name__} returned {ok!r}, not a Verdict"
    return bool(ok), capsys.readouterr().out


def assert_right(capsys, check, answer):
    ok, out = verdict(capsys, check, answer)
    assert ok is True and out.startswith("Correct:"), (answer, out)


def assert_wrong(capsys, check, answer, *says):
    """``answer`` is refused, with a hint that contains each of ``says``."""
    ok, out = verdict(capsys, check, answer)
    assert ok is False and out.startswith("Not yet:"), (answer, out)
    for words in says:
        assert words in out, (answer, words, out)
    return out


def assert_unanswered(capsys, check):
    ok, out = verdict(capsys, check, None)
    assert ok is False and out.startswith("Not answered yet"), out


def assert_help_hides(check, secrets, module=None):
    """None of ``secrets`` shows in ``check``'s signature and docstring (or ``module``'s)."""
    shown = str(inspect.signature(check)) + (check.__doc__ or "")
    if module is not None:
        shown += module.__doc__ or ""
    for secret in secrets:
        assert secret not in shown, (check.__name__, secret)


def assert_every_check_tested(module, tested):
    """Every ``check_*`` of ``module`` is among ``tested`` (the names a test module covers)."""
    assert {n for n in dir(module) if n.startswith("check_")} == set(tested)


def assert_grades(capsys, check, right, wrongs):
    """``right`` passes, each of ``wrongs`` fails with a hint, and no answer is not answered."""
    assert_right(capsys, check, right)
    for wrong in wrongs:
        assert_wrong(capsys, check, wrong)
    assert_unanswered(capsys, check)
