"""The command line's logging: swefleet's own lines at INFO; the libraries' log lines and
progress bars (httpx, urllib3, docker, transformers, datasets, huggingface_hub, tqdm, ...) only
with `--verbose`. Progress bars are switched off through the libraries' environment variables,
so the processes a command starts (trainer, servers) are quiet too; a variable the user set
wins."""

from __future__ import annotations

import logging
import os

#: loggers of the libraries swefleet uses, held at WARNING unless `--verbose`
NOISY_LOGGERS = ("httpx", "httpcore", "urllib3", "docker", "transformers", "datasets",
                 "huggingface_hub", "filelock", "fsspec", "asyncio", "torch", "matplotlib",
                 "PIL", "tokenizers", "vllm")  # fmt: skip

#: environment variables that quiet the libraries' progress bars and advisory output
QUIET_ENV = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "DATASETS_VERBOSITY": "error",
    "HF_HUB_VERBOSITY": "error",
}


def configure_logging(verbose: bool) -> None:
    """Root logging for one command; the libraries quiet unless `verbose` (then DEBUG, all)."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
    )
    if verbose:
        return
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
