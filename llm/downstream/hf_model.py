"""Any local Hugging Face causal LM folder, scored by the same scorer as our runs.

A folder (``config.json``, ``model.safetensors``, tokenizer files; e.g. what
``smallinit llm export`` writes) is loaded with ``AutoModelForCausalLM.from_pretrained``
(offline, safetensors only: nothing on disk is unpickled, no remote code) and wrapped so
that :class:`~smallinit.llm.downstream.scoring.TorchLM` sees what it sees of our Transformer: a
module mapping token ids (B, T) to logits (B, T, V), with ``cfg.context`` its longest input.
The tokenizer is the folder's ``tokenizer.json`` (the Rust ``tokenizers`` object our
scorer uses), or the fast tokenizer ``AutoTokenizer`` builds from the folder's files
(``trust_remote_code=False``: a ``tokenizer_config.json`` whose ``auto_map`` names Python
files of the folder is refused, and no such file is imported).

Results are stored under the name ``hf/<16 hex>``: the SHA-256 of the folder's files
(names and contents), so a changed folder is a new model and an unchanged one is reused
wherever it lies.

:func:`load_lm` is the one loader for scoring from Python: a RUN reference or an HF folder
→ a ready :class:`TorchLM`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from smallinit.core.config import CONFIG_BYTES, parse_json, read_user_file
from smallinit.core.errors import ConfigError, StoreError, one_line
from smallinit.llm.data.tokenizer import END_OF_TEXT, TOKENIZER, load_tokenizer
from smallinit.llm.downstream import scoring
from smallinit.llm.model.hf import _transformers
from smallinit.llm.training.trained import TrainedRun, resolve_run, run_tokenizer
from smallinit.llm.training.trained import load_trained as load_weights

DEFAULT_CONTEXT = 2048  # for a config that states no maximum length
HASH_CHUNK = 1 << 22


@dataclass(frozen=True)
class HFContext:
    """What the scorer reads of a model's config."""

    context: int


class HFCausalLM(nn.Module):
    """A Hugging Face causal LM seen as our Transformer: ``forward(idx)`` → logits."""

    def __init__(self, hf_model, context: int):
        super().__init__()
        self.hf = hf_model
        self.cfg = HFContext(int(context))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=idx, use_cache=False).logits

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 0.0,
        stop_tokens=(),
        prompt_lengths=None,
        until=None,
        pad_id: int = 0,
        **_ignored,
    ) -> torch.Tensor:
        """Greedy decoding with :meth:`Transformer.generate
        <smallinit.llm.model.transformer.Transformer.generate>`'s interface and semantics
        (left-padded rows of ``prompt_lengths`` real tokens, a sliding window of the last
        ``context`` tokens, stop tokens, the ``until(row, new_ids)`` callback, finished rows
        filled with ``pad_id``), one row at a time and without a cache: the benchmark
        scorer's path for a Hugging Face model, where equality matters more than speed."""
        if temperature != 0.0:
            raise ConfigError("a Hugging Face model is decoded greedily here (temperature 0)")
        rows, width = idx.shape
        lengths = list(prompt_lengths) if prompt_lengths is not None else [width] * rows
        out = torch.full(
            (rows, width + max_new_tokens), pad_id, dtype=torch.long, device=idx.device
        )
        out[:, :width] = idx
        context = self.cfg.context
        for r in range(rows):
            seq = idx[r, width - lengths[r] :].tolist()
            new: list[int] = []
            for _ in range(max_new_tokens):
                window = torch.tensor([seq[-context:]], dtype=torch.long, device=idx.device)
                token = int(self.forward(window)[0, -1].argmax())
                seq.append(token)
                new.append(token)
                if token in stop_tokens or (until is not None and until(r, new)):
                    break
            out[r, width : width + len(new)] = torch.tensor(new, dtype=torch.long)
        return out


def is_hf_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder with a Hugging Face ``config.json`` (not one of our run
    directories, whose ``config.json`` names a run ``kind``)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:  # a model's config.json is a few KB; deep nesting is refused, not recursed into
        meta = parse_json(
            read_user_file(config, what="config.json", limit=CONFIG_BYTES), str(config)
        )
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "kind" not in meta and "model_type" in meta


def check_hf_folder(path: str | Path) -> Path:
    """``path`` as a Hugging Face model folder, or a ConfigError saying what is missing."""
    folder = Path(path)
    if not folder.is_dir():
        what = "not a folder" if folder.exists() else "no such folder"
        raise ConfigError(
            f"--hf {path}: {what}; give a local Hugging Face model folder "
            "(config.json, model.safetensors, tokenizer files)"
        )
    if not is_hf_folder(folder):
        raise ConfigError(
            f"--hf {path}: no Hugging Face config.json (with a model_type) in "
            "it; give a folder written by save_pretrained or smallinit llm "
            "export"
        )
    if not any(folder.glob("*.safetensors")):
        raise ConfigError(
            f"--hf {path}: no .safetensors weights in it; only safetensors "
            "are loaded (pickled .bin weights are refused)"
        )
    return folder


def hf_model_name(folder: str | Path) -> str:
    """``hf/<16 hex>``: SHA-256 over the names and contents of the folder's files (hidden
    files and subfolders left out)."""
    digest = hashlib.sha256()
    for path in sorted(Path(folder).iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(HASH_CHUNK):
                digest.update(chunk)
        digest.update(b"\0")
    return "hf/" + digest.hexdigest()[:16]


def _refuse_custom_code(folder: Path) -> None:
    """A ConfigError when the folder's ``tokenizer_config.json`` maps its tokenizer to
    Python files of the folder (``auto_map``): such code is never run here."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return
    try:
        meta = parse_json(
            read_user_file(path, what="tokenizer_config.json", limit=CONFIG_BYTES), str(path)
        )
    except ConfigError:
        return  # unreadable: AutoTokenizer's own error names it
    if isinstance(meta, dict) and meta.get("auto_map"):
        raise ConfigError(
            f"--hf {folder}: its tokenizer_config.json maps the tokenizer to "
            "code in the folder (auto_map), which is never run; add a "
            "tokenizer.json (a tokenizers serialization) instead"
        )


def _tokenizer(folder: Path):
    if (folder / TOKENIZER).is_file():
        return load_tokenizer(folder / TOKENIZER)
    _refuse_custom_code(folder)
    tf = _transformers()
    try:
        tok = tf.AutoTokenizer.from_pretrained(
            folder, local_files_only=True, trust_remote_code=False
        )
    except Exception as err:  # transformers raises many types for a missing/odd tokenizer
        raise ConfigError(
            f"--hf {folder}: no usable tokenizer ({type(err).__name__}: {one_line(err)[:160]})"
        ) from None
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise ConfigError(
            f"--hf {folder}: its tokenizer is not a fast (tokenizers) one; add a tokenizer.json"
        )
    return backend


def _context(config) -> int:
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return DEFAULT_CONTEXT


def _eos(config) -> int | None:
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    return eos if isinstance(eos, int) else None


def load_hf(path: str | Path, device: str = "cpu"):
    """(wrapped model in eval mode, tokenizer, end-of-text id) of a local HF folder."""
    folder = check_hf_folder(path)
    tf = _transformers()
    try:
        hf_model = tf.AutoModelForCausalLM.from_pretrained(
            folder, local_files_only=True, use_safetensors=True, trust_remote_code=False
        )
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise StoreError(
            f"--hf {folder}: transformers cannot load it as a causal LM "
            f"({type(err).__name__}: {one_line(err)[:200]})"
        ) from None
    tok = _tokenizer(folder)
    model = HFCausalLM(hf_model.float(), _context(hf_model.config)).to(device).eval()
    return model, tok, _eos(hf_model.config)


def load_trained(run: TrainedRun, device: str = "cpu", *, trust_data: bool = False):
    """(model in eval mode, tokenizer, RunConfig, end-of-text id) of a finished run.

    Weights and tokenizer come from the run (:func:`smallinit.llm.training.trained.load_trained`,
    :func:`~smallinit.llm.training.trained.run_tokenizer`: for an older run without a stored
    tokenizer, the cached corpus the run was trained on, rebuilt if missing)."""
    cfg, model = load_weights(run.path)
    model.to(device).eval()
    tok = run_tokenizer(run, cfg, trust_data=trust_data)
    return model, tok, cfg, tok.token_to_id(END_OF_TEXT)


def load_lm(
    source: str | Path,
    *,
    runs_dir: str | Path | None = None,
    device: str = "cpu",
    batch_size: int = 16,
    trust_data: bool = False,
) -> scoring.TorchLM:
    """A model ready for :func:`~smallinit.llm.downstream.scoring.score_mc` and
    :func:`~smallinit.llm.downstream.scoring.score_gen`: ``source`` is a Hugging Face folder
    (e.g. an export) or a RUN reference (key, prefix, ``llm-train/<key>`` or a run
    directory, resolved under ``runs_dir``)."""
    if is_hf_folder(source):
        model, tok, eot = load_hf(source, device)
    else:
        model, tok, _, eot = load_trained(
            resolve_run(str(source), runs_dir), device, trust_data=trust_data
        )
    return scoring.TorchLM(model, tok, device=device, batch_size=batch_size, eot_id=eot)


__all__ = [
    "HFCausalLM",
    "is_hf_folder",
    "check_hf_folder",
    "hf_model_name",
    "load_hf",
    "load_trained",
    "load_lm",
]
