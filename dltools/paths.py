"""Where the course's own files are (``scripts/``, ``notebooks/`` and its checks, ``images/``), so
that no notebook depends on the folder it runs in.

A checkout of the course is found, in this order: the folder named by ``DP_COURSE_ROOT`` (each
notebook's set-up cell sets it, also on Colab and Kaggle, where it fetches the course first), else
the folder this package was loaded from, when that folder is a checkout (``pip install -e .``, or
the checkout on ``sys.path``).
"""
import os
from pathlib import Path

__all__ = ["ROOT_ENV", "course_root", "course_file"]

#: The environment variable that names the course's checkout.
ROOT_ENV = "DP_COURSE_ROOT"


def _is_checkout(folder):
    return (folder / "dltools" / "paths.py").is_file() and (folder / "notebooks").is_dir()


def course_root():
    """The folder of the course's checkout (the one holding ``dltools/``, ``notebooks/``,
    ``scripts/``).

    >>> (course_root() / "dltools" / "paths.py").is_file()
    True
    """
    named = os.environ.get(ROOT_ENV)
    if named:
        root = Path(named).expanduser().resolve()
        if not _is_checkout(root):
            raise FileNotFoundError(
                f"{ROOT_ENV}={named} is not a checkout of the course (no dltools/ and notebooks/ "
                f"there): point it at the folder that holds them, or unset it")
        return root
    here = Path(__file__).resolve().parent.parent
    if _is_checkout(here):
        return here
    raise FileNotFoundError(
        "the course's files (scripts/, notebooks/) are not beside this dltools: run the "
        "notebook's first code cell (it fetches the course), or set "
        f"{ROOT_ENV} to a checkout of it")


def course_file(*parts):
    """The course's file ``parts`` (e.g. ``course_file("scripts", "train_ddp.py")``), which must
    exist.

    >>> course_file("scripts", "train_ddp.py").name
    'train_ddp.py'
    >>> course_file("scripts", "no_such_script.py")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    FileNotFoundError: the course has no scripts/no_such_script.py (looked in ...)
    """
    root = course_root()
    path = root.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"the course has no {'/'.join(parts)} (looked in {root})")
    return path
