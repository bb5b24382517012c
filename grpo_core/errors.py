"""Errors caused by what the user gave (params, files, model names), as opposed to bugs.

Stages print these as one line naming the key, file or row, and exit with status 2; anything
else keeps its traceback.
"""


class InputError(ValueError):
    """Bad input: the message names the param key, the file or the row."""
