"""``LLMEngine``: requests in, one scheduled model step at a time, outputs out.

Data flow of ``step()`` (nano-vllm's, in vLLM v1's names):
``scheduler.schedule()`` -> ``model_runner.execute_model()`` -> ``sampler`` ->
append tokens, detokenize, check stops -> ``RequestOutput`` deltas.
Submission (``make_request``) validates everything first, so a bad request
raises before it touches any engine state and never disturbs the others.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from loom.json_types import JSONObject
from loom.runtime.config import STEP_PHASES, EngineConfig
from loom.runtime.detokenizer import IncrementalDetokenizer
from loom.runtime.distributed.executor import TensorParallelExecutor
from loom.runtime.errors import ContextLengthError, InvalidRequestError, KVCapacityError, QueueFullError
from loom.runtime.kv_cache_manager import KVCacheManager
from loom.runtime.kv_tier import DiskKVTier, model_fingerprint
from loom.runtime.model_runner import ModelRunner
from loom.runtime.models.loader import load_hf_config, load_model, resolve_model_path
from loom.runtime.outputs import RequestOutput
from loom.runtime.pool import num_kv_blocks
from loom.runtime.request import Request, RequestStatus
from loom.runtime.sampler import LogitsProcessor, Sampler
from loom.runtime.sampling_params import SamplingParams
from loom.runtime.scheduler import ScheduledRequest, Scheduler, SchedulerOutput
from loom.runtime.spec_decode.decoder import SpecDecoder
from loom.runtime.threads import cap_cpu_threads
from loom.runtime.structured_output.manager import StructuredOutputManager

if TYPE_CHECKING:
    from pathlib import Path

    from transformers import PretrainedConfig, PreTrainedTokenizerFast

logger = logging.getLogger(__name__)

"""Phases of ``LLMEngine.step`` whose host time ``step_times`` accumulates (seconds)."""


class LLMEngine:
    """The in-process engine. Not thread-safe: one thread calls it (see ``AsyncLLM``).

    Raises (constructor): ``NotFoundError`` for an unknown model, ``ValueError``
    for an invalid config.
    """

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.model_path = resolve_model_path(config.model)
        self.hf_config = load_hf_config(self.model_path, config.hf_overrides)
        self.max_model_len = config.resolve(self.hf_config)
        self.device = config.torch_device()
        if self.device.type == "cpu":
            cap_cpu_threads()
        self.dtype = config.torch_dtype(self.hf_config)
        config.resolve_quantization(self.device, self.dtype)
        torch.manual_seed(config.seed)
        self.tokenizer = _load_tokenizer(config.tokenizer or str(self.model_path))
        num_blocks = num_kv_blocks(config, self.hf_config, self.dtype, self.device)
        self.runner: ModelRunner | TensorParallelExecutor
        if config.tensor_parallel_size > 1:
            self.runner = TensorParallelExecutor(config, self.model_path, self.hf_config, num_blocks, self.dtype)
        else:
            model = load_model(
                self.model_path, self.hf_config, dtype=self.dtype, device=self.device,
                load_format=config.load_format, max_positions=self.max_model_len, seed=config.seed,
                quantization=config.quantization, group_size=config.quantization_group_size,
            )
            self.runner = ModelRunner(
                model, self.hf_config, num_blocks, config.block_size, self.device, self.dtype,
                config.attention_backend,
            )
        self.kv = KVCacheManager(num_blocks, config.block_size, config.enable_prefix_caching,
                                 retention_max_fraction=config.kv_retention_max_fraction,
                                 retention_max_ttl_s=config.kv_retention_max_ttl_s, tier=self._tier())
        self.scheduler = Scheduler(self.kv, config.max_num_seqs, config.max_num_batched_tokens, self.max_model_len)
        self.sampler = Sampler(config.seed, self.device)
        self.logits_processors: list[LogitsProcessor] = []
        self.requests: dict[str, Request] = {}
        self._pending: list[RequestOutput] = []
        self.eos_token_ids = _eos_ids(self.model_path, self.hf_config, self.tokenizer)
        self.vocab_size = int(self.hf_config.vocab_size)
        # grammar masks run as a logits processor; speculation wraps sampling (loom.runtime.spec_decode)
        self.structured = StructuredOutputManager(self.tokenizer, self.vocab_size, self.eos_token_ids)
        self.logits_processors.append(self.structured)
        self.spec: SpecDecoder | None = None
        if config.speculative_config is not None:
            self.spec = SpecDecoder(
                config.speculative_config, vocab_size=self.vocab_size, num_blocks=num_blocks,
                block_size=config.block_size, device=self.device, dtype=self.dtype,
                max_model_len=self.max_model_len, seed=config.seed,
            )
        self.num_steps = 0
        self.num_generated_tokens = 0
        self.step_times = dict.fromkeys(STEP_PHASES, 0.0)

    # -- submission ----------------------------------------------------------

    def make_request(
        self,
        prompt_token_ids: Sequence[int],
        sampling_params: SamplingParams | None = None,
        request_id: str | None = None,
        arrival_time: float | None = None,
    ) -> Request:
        """Validate a submission and build its ``Request`` (engine state untouched).

        Raises:
            InvalidRequestError: empty prompt or token ids outside the vocabulary.
            ContextLengthError: prompt longer than ``max_model_len`` tokens.
            KVCapacityError: the request could never fit the KV block pool.
            InvalidRequestError: ``structured_output`` that cannot compile (a ValueError).
            ValueError: ``sampling_params`` is not a ``SamplingParams``.
        """
        params = sampling_params if sampling_params is not None else SamplingParams()
        if not isinstance(params, SamplingParams):
            raise InvalidRequestError("sampling_params: must be a SamplingParams", param="sampling_params")
        ids = [int(t) for t in prompt_token_ids]
        if not ids:
            raise InvalidRequestError("prompt_token_ids: must not be empty", param="prompt_token_ids")
        if min(ids) < 0 or max(ids) >= self.vocab_size:
            raise InvalidRequestError(
                f"prompt_token_ids: ids must be in [0, {self.vocab_size})", param="prompt_token_ids"
            )
        max_len = self.max_model_len
        if len(ids) > max_len:
            raise ContextLengthError(
                f"prompt has {len(ids)} tokens, more than max_model_len={max_len}", param="prompt_token_ids"
            )
        needed = self.kv.blocks_needed(min(len(ids) + params.max_tokens, max_len))
        if needed > self.kv.num_blocks:
            raise KVCapacityError(
                f"request needs {needed} KV blocks ({len(ids)} prompt + {params.max_tokens} output tokens) "
                f"but the pool has {self.kv.num_blocks} blocks of {self.kv.block_size} tokens",
                param="max_tokens",
            )
        # compiled here so an uncompilable schema is a ValueError before it joins the batch
        matcher = None if params.structured_output is None else self.structured.init_request(params.structured_output)
        req = Request(
            request_id=request_id or uuid.uuid4().hex,
            prompt_token_ids=ids,
            sampling_params=params,
            arrival_time=arrival_time if arrival_time is not None else time.monotonic(),
            max_tokens=min(params.max_tokens, max(1, max_len - len(ids))),
            eos_token_ids=frozenset() if params.ignore_eos else self.eos_token_ids,
        )
        req.structured_state = matcher
        if params.seed is not None:
            req.generator = torch.Generator(device=self.device).manual_seed(params.seed)
        req.detokenizer = IncrementalDetokenizer(self.tokenizer.backend_tokenizer, ids, params)
        return req

    def add_request(
        self,
        prompt_token_ids: Sequence[int],
        sampling_params: SamplingParams | None = None,
        request_id: str | None = None,
        arrival_time: float | None = None,
    ) -> str:
        """Validate and queue a request; returns its id.

        Raises:
            the errors of ``make_request``; ``QueueFullError`` when
            ``max_waiting`` requests wait; ``InvalidRequestError`` for a
            duplicate ``request_id``.
        """
        return self.add_prepared(self.make_request(prompt_token_ids, sampling_params, request_id, arrival_time))

    def add_prepared(self, req: Request) -> str:
        """Queue a request built by ``make_request``."""
        if req.request_id in self.requests:
            raise InvalidRequestError(f"request_id: {req.request_id!r} is already running", param="request_id")
        if len(self.scheduler.waiting) >= self.config.max_waiting:
            raise QueueFullError(f"{len(self.scheduler.waiting)} requests are waiting (max_waiting)")
        self.requests[req.request_id] = req
        self.scheduler.add_request(req)
        return req.request_id

    def retain_kv(self, key: str, ttl_s: float, waiting_on_tool: bool = False) -> int:
        """Re-time the KV pins of ``key`` to ``ttl_s`` seconds from now, as a tool wait or an idle wait
        (``0`` releases them; :mod:`loom.runtime.kv_retention`); returns the blocks it holds pinned."""
        return self.kv.retain(key, ttl_s, waiting_on_tool)

    def abort_request(self, request_id: str) -> bool:
        """Abort a request; its final output (``finish_reason="abort"``) comes with the next ``step``.

        Returns:
            False when no such request is in flight.
        """
        req = self.requests.pop(request_id, None)
        if req is None:
            return False
        self.scheduler.finish(req, RequestStatus.FINISHED_ABORTED)
        req.finish_time = time.monotonic()
        self._pending.append(self._output(req))
        return True

    def shutdown(self) -> None:
        """Write every pinned KV block to the disk tier, if any (a restarted engine on the same tier folder
        serves them), and stop the tensor-parallel worker processes, if any (idempotent)."""
        self._save_to_tier(self.kv.pinned_blocks_to_save())
        if isinstance(self.runner, TensorParallelExecutor):
            self.runner.shutdown()

    def _tier(self) -> DiskKVTier | None:
        """The disk tier of ``EngineConfig.kv_tier_dir`` (``None`` without one), keyed by this model's fingerprint.

        Raises:
            ValueError: a tier with tensor parallelism (not supported).
        """
        cfg = self.config
        if cfg.kv_tier_dir is None:
            return None
        if cfg.tensor_parallel_size > 1:
            raise ValueError("kv_tier_dir: a disk tier needs tensor_parallel_size 1")
        return DiskKVTier(cfg.kv_tier_dir, model_fingerprint(self.model_path, cfg, self.dtype, self.hf_config),
                          cfg.kv_tier_bytes)

    def _save_to_tier(self, saves: Sequence[tuple[int, bytes]]) -> None:
        """Write these blocks' KV to the disk tier (before a step overwrites them)."""
        tier = self.kv.tier
        if not saves or tier is None or not isinstance(self.runner, ModelRunner):
            return
        kv = self.runner.read_blocks([b for b, _ in saves])
        for (_, key), block in zip(saves, kv):
            tier.put(key, block)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests) or bool(self._pending)

    # -- stepping ------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one scheduled step; return outputs of requests that changed.

        A step that fails (the forward pass or sampling raises: CUDA OOM, a
        kernel error) fails only the requests it scheduled: each finishes with
        ``finish_reason="error"``, its blocks go back to the pool, the hashes
        the step registered are dropped (``KVCacheManager.discard_uncommitted``)
        and the engine keeps serving the others.  A request whose own input
        breaks (its grammar cannot continue) fails alone the same way.
        ``KeyboardInterrupt`` and other ``BaseException``s clean up the same
        way and propagate.

        Host time per phase accumulates in ``step_times`` (seconds; keys
        ``schedule``, ``prepare_inputs``, ``model``, ``sampler``,
        ``output_processing``); ``loom bench overhead`` prints it per step.
        """
        outputs, self._pending = self._pending, []
        t0 = time.perf_counter()
        if self.spec is not None:
            try:
                self.spec.propose(self.scheduler.running, self.kv)
            except Exception:  # noqa: BLE001 - a failed draft costs only this step's speedup
                logger.exception("drafting failed; this step decodes without speculation")
                for req in self.scheduler.running:
                    req.spec_token_ids = []
        sched = self.scheduler.schedule()
        if sched.is_empty:
            return outputs
        try:
            self._run_step(sched, outputs, t0)
        except BaseException as exc:
            self._fail_step(sched, exc, outputs)
            if not isinstance(exc, Exception):
                self._pending = outputs + self._pending  # delivered by the next step
                raise
        return outputs

    def _run_step(self, sched: SchedulerOutput, outputs: list[RequestOutput], t0: float) -> None:
        num_logits = [1 + s.num_spec_tokens if s.samples else 0 for s in sched.scheduled]
        prompt_rows = [_prompt_logprob_rows(s) for s in sched.scheduled]
        t1 = time.perf_counter()
        self._save_to_tier(self.kv.take_blocks_to_save())
        loads = self.kv.take_blocks_to_load()  # only a ModelRunner engine has a tier (tensor parallelism has none)
        extra = {"blocks_to_load": loads} if loads else {}
        logits = self.runner.execute_model(sched.scheduled, [n + p for n, p in zip(num_logits, prompt_rows)],
                                           blocks_to_copy=sched.blocks_to_copy, **extra)
        self.kv.commit()
        if any(prompt_rows):
            logits = _take_prompt_logprobs(logits, sched.scheduled, prompt_rows, num_logits)
        t2 = time.perf_counter()
        self.scheduler.update_after_step(sched)
        self.num_steps += 1
        rows = [s for s in sched.scheduled if s.samples]
        times = self.step_times
        times["schedule"] += t1 - t0 + time.perf_counter() - t2
        times["prepare_inputs"] += self.runner.last_prepare_s
        times["model"] += t2 - t1 - self.runner.last_prepare_s
        if not rows:
            return
        t3 = time.perf_counter()
        if self.spec is not None:
            results = self.spec.sample(logits, rows, self.sampler, self.logits_processors, self.structured)
        else:
            sampled = self.sampler(logits, [s.request for s in rows], self.logits_processors)
            results = [([t], [lp], 0) for t, lp in zip(sampled.token_ids, sampled.logprobs)]
        t4 = time.perf_counter()
        times["sampler"] += t4 - t3
        now = time.monotonic()
        for s, (tokens, logprobs, num_accepted) in zip(rows, results):
            req = s.request
            if req.error is not None:  # its grammar broke while masking: it alone fails
                self._finish(req, RequestStatus.FINISHED_ERROR, now)
            for token, lp in zip(tokens, logprobs):
                if req.is_finished:
                    break
                self._append_token(req, token, lp, now)
            if s.num_spec_tokens and self.spec is not None:
                self.spec.record(req, s.num_spec_tokens, num_accepted)
                if not req.is_finished:
                    self.spec.release(req, num_accepted, self.kv)
            if req.is_finished or req.sampling_params.output_kind != "final_only":
                outputs.append(self._output(req))
            if req.is_finished:
                self.requests.pop(req.request_id, None)
        times["output_processing"] += time.perf_counter() - t4

    def _fail_step(self, sched: SchedulerOutput, exc: BaseException, outputs: list[RequestOutput]) -> None:
        """Finish every unfinished request of a failed step with ``FINISHED_ERROR``."""
        self.kv.discard_uncommitted(sched.blocks_to_copy)
        if isinstance(exc, Exception):
            logger.exception("engine step failed; failing its %d requests", len(sched.scheduled))
        now = time.monotonic()
        reason = f"the model step failed ({type(exc).__name__})"
        for s in sched.scheduled:
            req = s.request
            if req.is_finished or self.requests.get(req.request_id) is not req:
                continue
            req.error = reason
            self._finish(req, RequestStatus.FINISHED_ERROR, now)
            outputs.append(self._output(req))
            self.requests.pop(req.request_id, None)

    def _append_token(self, req: Request, token: int, logprobs: dict[int, float] | None, now: float) -> None:
        req.append_output_token(token, now)
        self.num_generated_tokens += 1
        if req.structured_state is not None:
            self.structured.accept(req, [token])
        if req.logprobs is not None:
            req.logprobs.append(logprobs or {})
        params = req.sampling_params
        stop_token = token in req.eos_token_ids or token in params.stop_token_ids
        if req.num_output_tokens < params.min_tokens:  # vLLM: no stop of any kind before min_tokens
            stop_token = False
        if not stop_token or params.include_stop_str_in_output:
            assert req.detokenizer is not None  # make_request gives every request one
            stop_str = req.detokenizer.add_token(token, check_stop=req.num_output_tokens >= params.min_tokens)
            if stop_str is not None:
                req.stop_reason = stop_str
                return self._finish(req, RequestStatus.FINISHED_STOPPED, now)
        if stop_token:
            req.stop_reason = token if token in params.stop_token_ids else None
            return self._finish(req, RequestStatus.FINISHED_STOPPED, now)
        if req.num_output_tokens >= req.max_tokens or req.num_tokens >= self.max_model_len:
            return self._finish(req, RequestStatus.FINISHED_LENGTH, now)
        return None

    def _finish(self, req: Request, status: RequestStatus, now: float) -> None:
        self.scheduler.finish(req, status)
        req.finish_time = now

    def _output(self, req: Request) -> RequestOutput:
        start = req.num_prompt_tokens + req.num_output_sent
        new_ids = req.all_token_ids[start:]
        delta = req.sampling_params.output_kind == "delta"
        first_new = req.num_output_sent
        req.num_output_sent = req.num_output_tokens
        new_text = req.detokenizer.delta(req.is_finished) if req.detokenizer else ""
        logprobs = req.logprobs
        if logprobs is not None:
            logprobs = logprobs[first_new:] if delta else list(logprobs)
        prompt_logprobs = req.prompt_logprobs
        if prompt_logprobs is not None and (len(prompt_logprobs) < req.num_prompt_tokens
                                            or (delta and first_new > 0)):
            prompt_logprobs = None  # not complete yet, or (delta) already delivered
        return RequestOutput(
            request_id=req.request_id,
            prompt_token_ids=req.prompt_token_ids,
            token_ids=new_ids if delta else req.output_token_ids,
            text=new_text if delta else (req.detokenizer.text if req.detokenizer else ""),
            new_token_ids=new_ids,
            new_text=new_text,
            finished=req.is_finished,
            finish_reason=req.finish_reason,
            stop_reason=req.stop_reason,
            num_cached_tokens=max(req.num_cached_tokens, 0),
            arrival_time=req.arrival_time,
            first_token_time=req.first_token_time,
            finish_time=req.finish_time,
            token_times=req.token_times[first_new:] if delta else list(req.token_times),
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            num_drafts=req.num_drafts,
            num_draft_tokens=req.num_draft_tokens,
            num_accepted_tokens=req.num_accepted_tokens,
            num_recompute_tokens=req.num_recompute_tokens,
            num_recompute_cached_tokens=req.num_recompute_cached_tokens,
            kv_miss_tokens=dict(req.kv_miss_tokens or {}),
            kv_tier_tokens=req.kv_tier_tokens or 0,
            error=req.error,
            error_param=req.error_param,
        )

    def stats(self) -> JSONObject:
        """Engine counters (see the README's runtime section for each key)."""
        return {
            **self.kv.stats(),
            "num_preemptions": self.scheduler.num_preemptions,
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "num_steps": self.num_steps,
            "num_generated_tokens": self.num_generated_tokens,
            **(self.spec.stats.as_dict() if self.spec is not None else {}),
        }


def _prompt_logprob_rows(s: ScheduledRequest) -> int:
    """Logits rows a scheduled chunk needs for ``prompt_logprobs`` besides its sampling rows.

    Position ``p`` of the prompt gives the logprob of prompt token ``p + 1``;
    the chunk ``[a, b)`` covers the positions not yet computed up to the
    prompt's second-to-last (the last one's logits are the sampling row).
    After a preemption the recomputed positions are not counted again.  The
    rows are the chunk's trailing ones, just before its sampling row.
    """
    req = s.request
    if req.prompt_logprobs is None:
        return 0
    a = req.num_computed_tokens
    b = a + s.num_new_tokens - s.num_spec_tokens
    start = max(a, len(req.prompt_logprobs) - 1)
    return max(0, min(b, req.num_prompt_tokens - 1) - start)


def _take_prompt_logprobs(logits: torch.Tensor, scheduled: Sequence[ScheduledRequest], prompt_rows: Sequence[int],
                          num_logits: Sequence[int]) -> torch.Tensor:
    """Append each request's prompt logprobs from its rows of ``logits``; return the sampling rows.

    ``logits`` is ``[sum(prompt_rows + num_logits), V]`` float32, per request
    its ``prompt_rows[i]`` rows then its ``num_logits[i]`` sampling rows.
    Each entry is ``{prompt token: logprob}`` plus the top-n (n =
    ``SamplingParams.prompt_logprobs``), raw model log-probabilities.
    """
    keep: list[int] = []
    row = 0
    for s, n_prompt, n_sample in zip(scheduled, prompt_rows, num_logits):
        req = s.request
        if n_prompt:
            entries = req.prompt_logprobs
            assert entries is not None  # rows are given only to requests that asked (_prompt_logprob_rows)
            lsm = torch.log_softmax(logits[row:row + n_prompt].float(), dim=-1)
            first = len(entries)  # the prompt token the first row predicts
            targets = torch.tensor(req.prompt_token_ids[first:first + n_prompt], device=lsm.device)
            own = lsm.gather(1, targets[:, None]).squeeze(1).tolist()
            top_n = req.sampling_params.prompt_logprobs
            top = lsm.topk(top_n, dim=-1) if top_n else None
            for j, (tok, lp) in enumerate(zip(targets.tolist(), own)):
                entry = {tok: lp}
                if top is not None:
                    entry.update(zip(top.indices[j].tolist(), top.values[j].tolist()))
                entries.append(entry)
        keep.extend(range(row + n_prompt, row + n_prompt + n_sample))
        row += n_prompt + n_sample
    return logits[torch.tensor(keep, dtype=torch.long, device=logits.device)]


def _load_tokenizer(path: str) -> PreTrainedTokenizerFast:
    """The checkpoint's fast tokenizer (the engine detokenizes with its Rust backend).

    Raises:
        ValueError: ``path`` has only a slow (Python) tokenizer.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tokenizer = AutoTokenizer.from_pretrained(path)
    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        raise ValueError(f"tokenizer: {path} has no fast tokenizer (tokenizer.json)")
    return tokenizer


def _eos_ids(path: Path, hf_config: PretrainedConfig, tokenizer: PreTrainedTokenizerFast) -> frozenset[int]:
    """EOS ids from the tokenizer, the model config and generation_config.json."""
    ids: set[int] = set()
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(hf_config, "eos_token_id", None)):
        ids.update(_as_list(value))
    try:
        from transformers import GenerationConfig

        ids.update(_as_list(GenerationConfig.from_pretrained(str(path)).eos_token_id))
    except (OSError, ValueError):
        pass
    return frozenset(ids)


def _as_list(value: int | Sequence[int] | None) -> list[int]:
    if value is None:
        return []
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]
