"""Load one split of a `SourceSpec`: from the Hugging Face hub, after a quick probe that it answers, or
from a local file, ``save_to_disk`` folder or hub snapshot.

The probe (`hub_unreachable`) exists only for loading: without it ``datasets`` retries for about
25 s before failing with a message that does not say what to do instead.
"""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from coba_verl.data.sources import SourceSpec

__all__ = ["HUB_PROBE_TIMEOUT_S", "hub_unreachable", "load_split"]

logger = logging.getLogger(__name__)

_LOCAL_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
#: Seconds to wait for the hub before saying it is unreachable (instead of ~25 s of retries).
HUB_PROBE_TIMEOUT_S = 5.0
_hub_probes: dict[str, str | None] = {}


def hub_unreachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why the Hugging Face hub cannot be reached, or ``None`` when it answers (once per process).

    One HEAD request to the endpoint (``HF_ENDPOINT``, proxies from the environment); any HTTP
    answer, even an error status, counts as reachable. Skipped (``None``) under ``HF_HUB_OFFLINE``,
    where ``datasets`` reads its local cache only.
    """
    import datasets
    from huggingface_hub import constants

    if datasets.config.HF_HUB_OFFLINE:
        return None
    endpoint = constants.ENDPOINT
    if endpoint not in _hub_probes:
        try:
            urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)
            _hub_probes[endpoint] = None
        except urllib.error.HTTPError:  # the hub answered
            _hub_probes[endpoint] = None
        except (urllib.error.URLError, OSError) as err:  # DNS, refused, timeout
            reason = getattr(err, "reason", err)
            _hub_probes[endpoint] = f"{endpoint} is unreachable ({reason})"
    return _hub_probes[endpoint]


def load_split(
    spec: SourceSpec,
    split: str,
    *,
    local_path: str | os.PathLike[str] | None = None,
    hub_id: str | None = None,
    hub_config: str | None = None,
    local_key: str | None = None,
) -> tuple[Any, str]:
    """Load one split as a ``datasets.Dataset``; returns it with a description of its origin.

    Without ``local_path`` this is ``datasets.load_dataset(hub_id, hub_config, split=...)``, after
    a quick check that the hub answers at all (`hub_unreachable`). ``local_path`` may be a
    ``.parquet`` / ``.jsonl`` / ``.json`` / ``.csv`` file (read whole as this split), a directory
    written by ``save_to_disk``, or a downloaded hub snapshot. ``local_key`` is the KEY of
    ``--local-path KEY=FILE`` that serves this split (default: the split; a group uses the member
    name); it only shapes the message when the hub fails.

    Raises:
        RuntimeError: the hub is unreachable or cannot serve the split; the message gives the
            ``--local-path`` form that works instead.
    """
    import datasets

    if split not in spec.splits:
        raise ValueError(f"{spec.name} has no split {split!r}; its splits are {sorted(spec.splits)}.")
    hub_split = spec.splits[split]
    if local_path is None:
        repo = hub_id or spec.hub_id
        config = hub_config if hub_config is not None else spec.hub_config
        origin = f"hf://{repo}" + (f" ({config})" if config else "") + f" split={hub_split}"
        instead = (
            f"Download it elsewhere and pass --local-path {local_key or split}=FILE "
            "(parquet/jsonl/json/csv) or a hub snapshot directory"
        )
        down = hub_unreachable()
        if down:
            raise RuntimeError(
                f"Could not load {origin} for {spec.name}: the Hugging Face hub at {down}. {instead}; "
                "or, if an earlier run cached it, set HF_HUB_OFFLINE=1 to read the cache."
            )
        logger.info("Loading %s from the Hugging Face hub: %s", spec.name, origin)
        try:
            return datasets.load_dataset(repo, config, split=hub_split), origin
        except Exception as err:  # renamed, gated, hub error: say how to continue without the hub
            raise RuntimeError(f"Could not load {origin} for {spec.name}: {err}. {instead}.") from err

    path = Path(local_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"--local-path {path} does not exist.")
    origin = str(path.resolve())
    if path.is_file():
        builder = _LOCAL_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise ValueError(
                f"--local-path {path} has suffix {path.suffix!r}; use one of {sorted(_LOCAL_BUILDERS)}."
            )
        return datasets.load_dataset(builder, data_files=str(path), split="train"), origin
    if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if hub_split not in loaded:
                raise ValueError(f"{path} has splits {sorted(loaded)}, not {hub_split!r}.")
            loaded = loaded[hub_split]
        return loaded, origin
    config = hub_config if hub_config is not None else spec.hub_config
    return datasets.load_dataset(str(path), config, split=hub_split), origin
