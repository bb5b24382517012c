"""Errors caused by what the user gave (params, files, model names), as opposed to bugs.

Stages print these as one line naming the key, file or row, and exit with status 2; anything
else keeps its traceback.
"""


class InputError(ValueError):
    """Bad input: the message names the param key, the file or the row."""


class Interrupted(Exception):
    """A stage stopped by the user (Ctrl-C, SIGTERM): the message says where it stopped and how
    to go on (e.g. "at step 12 of 40; the last checkpoint is step 10: `dvc repro` resumes
    there"). Stages print it as one line and exit with status 130."""
