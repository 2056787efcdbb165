"""The body of one rank forked from the test suite's forkserver (conftest.py).
A module of its own, importing nothing heavy: the forkserver's child imports
it to find main()."""

import faulthandler
import os
import runpy
import signal
import sys


def main(script, env, out_path, err_path):
    """Run `script` (a path) as __main__ under the environment `env` (a
    dict), with stdout and stderr going to the files out_path and err_path.
    The script's SystemExit code is the process's exit code; an uncaught
    exception's traceback goes to err_path and the exit code is 1. SIGUSR1
    writes every thread's Python stack to err_path (the harness sends it to a
    rank it is about to kill for running past its time)."""
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out_path), (2, err_path)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")
