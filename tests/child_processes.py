"""Child processes of the test scripts (kill_one_rank.py, pause_and_restart.py)."""
import ctypes
import os

PR_SET_PDEATHSIG = 1


def dies_with(parent, sig):
    """A preexec_fn for subprocess.Popen: the child gets signal `sig` when process `parent` (the script) ends,
    however it ends (SIGKILL included); and exits at once if `parent` is gone already. Linux prctl(2)."""
    def preexec():
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:
            os._exit(1)
    return preexec
