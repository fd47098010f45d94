"""How DataLoader workers of a remote dataset start: forked from a server that already imported
torch."""

import subprocess
import sys


def test_remote_datasets_workers_fork_from_a_server_that_preloaded_torch():
    """The forkserver (a process-wide server, so this runs in a fresh interpreter) imports torch and
    the DataLoader wiring before it forks a worker; a module the user asked it to preload stays on
    its list."""
    code = (
        "from multiprocessing import forkserver\n"
        "forkserver.set_forkserver_preload(['__main__', 'json'])\n"
        "from datapipe.loader.torch.dataloader import _forkserver\n"
        "assert _forkserver().get_start_method() == 'forkserver'\n"
        "print(forkserver._forkserver._preload_modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['__main__', 'json', 'torch', 'datapipe.loader.torch.dataloader']"
