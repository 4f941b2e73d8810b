"""The embedded engine: one generation thread doing continuous batching over a transformers model.

Requests wait in a FIFO queue. Each round the thread (1) applies cancellations and weight
updates, (2) admits waiting sequences up to `max_batch_size`, prefilling them and sampling their
first token, (3) runs one batched decode step over every running sequence. Finished sequences
leave the batch at once and new ones join at the next round, so a long request never holds a
short one back. The KV cache is a backend (`backends.py`): `dynamic` (transformers' forward,
left-padded batch of per-prompt caches, any model) or `static` (preallocated slots, batched
prefill, CUDA-graph decode; Llama-family models); `auto` takes static on CUDA when it can. Both
reuse the K/V of finished requests for later prompts sharing their prefix (`prefix.py`).

All methods except the thread's own are thread-safe; results are delivered by calling each
request's `on_done` from the generation thread (the server turns that into an asyncio future);
a streamed request also gets `on_token(token, logprob, top)` per sampled token that does not
end it (the last ones arrive with `on_done`'s result; `stream.py` hands them to the event loop).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from swefleet.inference.engine.backends import KVMode, make_backend
from swefleet.inference.engine.experts import make_capture
from swefleet.inference.engine.sampling import RowParams, Sampled, make_generator, sample
from swefleet.inference.engine.weights import StagedWeights, apply_weights

log = logging.getLogger(__name__)


class EngineDead(RuntimeError):
    """The generation thread stopped (shut down or crashed); no request can be served."""


class QueueFull(RuntimeError):
    """More requests are waiting than `max_queue` allows."""


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    top_logprobs: int = 0
    """How many top alternatives (id, logprob) to return per token; 0: none."""


@dataclass
class GenerationResult:
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: str
    """`stop` (EOS or a stop id), `length` (max_tokens or max_model_len), `abort`."""
    stop_reason: int | None
    abort_reason: str | None
    """`cancelled`, `weight_update` or `shutdown` when finish_reason is `abort`."""
    policy_version: int
    """Weights version that generated the first token (the oldest one in this result)."""
    policy_version_final: int
    prompt_len: int
    cached_tokens: int = 0
    """Prompt tokens whose K/V came from the prefix cache (not recomputed)."""
    routed_experts: Any = None
    """MoE models: numpy (prompt + generated - 1, layers, top_k) expert ids, vLLM's format
    (`experts.py`); None for dense models or a request that never reached a forward."""


@dataclass
class UpdateResult:
    policy_version: int
    aborted: int
    apply_s: float
    decode_steps: int = 0
    """Decode steps since the previous update (or the start)."""
    decode_rows: int = 0
    """Rows those steps decoded (their sum of batch sizes)."""
    prefill_rounds: int = 0
    """Rounds that admitted new requests since the previous update."""
    longest_row_sum: int = 0
    """Sum over those decode steps of the longest running row's length (prompt + generated):
    with the mean (`/ decode_steps`) it shows whether a batch's rows ran together (equal-length
    answers started at once: about half the answer length plus the prompt) or in offset cohorts
    (higher: every step attends over the leading cohort's rows)."""


@dataclass(eq=False)
class _Seq:
    id: str
    prompt_ids: list[int]
    params: SamplingParams
    on_done: Callable[[Any], None]
    row: RowParams
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    version_start: int | None = None
    cached_tokens: int = 0
    routed: Any = None
    """Routed experts of the finished sequence (MoE models), kept until its row is dropped."""
    on_token: Callable[[int, float, list[tuple[int, float]] | None], None] | None = None


@dataclass
class _Update:
    staged: StagedWeights
    version: int
    abort: bool
    on_done: Callable[[Any], None]


@dataclass
class EngineCounters:
    requests: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    decode_steps: int = 0
    decode_rows: int = 0
    prefill_rounds: int = 0
    longest_row_sum: int = 0
    weight_updates: int = 0
    prefix_queries: int = 0
    """Prompt tokens of prefilled requests (vLLM's `prefix_cache_queries`)."""
    prefix_hits: int = 0
    """Of those, tokens served from the prefix cache (vLLM's `prefix_cache_hits`)."""
    finished: Counter = field(default_factory=Counter)


class Engine:
    """Continuous-batching generation over a causal LM on one device."""

    def __init__(
        self,
        model: Any,
        eos_ids: frozenset[int],
        *,
        max_model_len: int,
        max_batch_size: int = 16,
        max_queue: int = 0,
        policy_version: int = 0,
        kv_mode: KVMode = "dynamic",
        kv_capacity: int = 0,
        cuda_graphs: bool = True,
        prefix_cache: bool = True,
        prefix_cache_bytes: int = 1 << 30,
        routed_experts: bool = True,
        gpu_memory_fraction: float | None = None,
    ) -> None:
        self.model = model
        self._routing = make_capture(model, routed_experts)
        self.device = next(model.parameters()).device
        self.eos_ids = eos_ids
        self._kv = make_backend(
            model,
            mode=kv_mode,
            max_batch_size=max_batch_size,
            max_model_len=max_model_len,
            kv_capacity=kv_capacity,
            cuda_graphs=cuda_graphs,
            prefix_cache=prefix_cache,
            prefix_cache_bytes=prefix_cache_bytes,
            gpu_memory_fraction=gpu_memory_fraction,
        )
        self.kv_mode = type(self._kv).__name__
        self.max_model_len = self._kv.max_len
        self.max_batch_size = max_batch_size
        self.max_queue = max_queue
        self.policy_version = policy_version
        self.counters = EngineCounters()
        self._at_last_update = EngineCounters()
        """The counters as they were at the last weight update (an update reports the window)."""
        self.error: BaseException | None = None
        self._cv = threading.Condition()
        self._waiting: deque[_Seq] = deque()
        self._seqs: dict[str, _Seq] = {}
        self._cancels: set[str] = set()
        self._updates: list[_Update] = []
        self._running: list[_Seq] = []
        self._stopping = False
        self._ids = itertools.count()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)

    # ---- API (any thread) ----

    def start(self) -> None:
        self._thread.start()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop the thread; running and waiting requests end with abort (`shutdown`)."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stopping

    def kv_usage(self) -> float | None:
        """Static cache: fraction of its token slots in use; dynamic cache: None (it grows)."""
        usage = getattr(self._kv, "usage", None)
        return usage() if usage else None

    def load(self) -> tuple[int, int]:
        """(running, waiting) right now."""
        return len(self._running), len(self._waiting)

    def submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_done: Callable[[Any], None],
        on_token: Callable[[int, float, list[tuple[int, float]] | None], None] | None = None,
    ) -> str:
        """Queue a request; `on_done` later gets a `GenerationResult` or an exception;
        `on_token` (streaming) gets each sampled token that does not end the request, its
        logprob and its top alternatives (None unless `top_logprobs`), from the generation
        thread as soon as it is sampled; the result holds every token, the last ones included."""
        self._validate(prompt_ids, params)
        seq = _Seq(
            f"seq-{next(self._ids)}",
            list(prompt_ids),
            params,
            on_done,
            RowParams(
                params.temperature,
                params.top_p,
                make_generator(params.seed),
                params.top_logprobs,
            ),
            on_token=on_token,
        )
        with self._cv:
            if not self.alive:
                raise EngineDead(f"engine is not running: {self.error!r}")
            if self.max_queue and len(self._waiting) >= self.max_queue:
                raise QueueFull(f"{len(self._waiting)} requests waiting")
            self._waiting.append(seq)
            self._seqs[seq.id] = seq
            self.counters.requests += 1
            self.counters.prompt_tokens += len(prompt_ids)
            self._cv.notify()
        return seq.id

    def cancel(self, seq_id: str) -> None:
        """End a request early with finish_reason `abort` (`cancelled`); no-op when finished."""
        with self._cv:
            self._cancels.add(seq_id)
            self._cv.notify()

    def update_weights(
        self, staged: StagedWeights, version: int, abort: bool, on_done: Callable[[Any], None]
    ) -> None:
        """Copy staged weights in between two decode steps; `on_done` gets an `UpdateResult`."""
        with self._cv:
            if not self.alive:
                raise EngineDead(f"engine is not running: {self.error!r}")
            self._updates.append(_Update(staged, version, abort, on_done))
            self._cv.notify()

    def _validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        if not prompt_ids:
            raise ValueError("prompt is empty")
        if params.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if len(prompt_ids) + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds "
                f"max_model_len {self.max_model_len}"
            )
        vocab = self.model.get_input_embeddings().num_embeddings
        if max(prompt_ids) >= vocab:
            raise ValueError(f"token id {max(prompt_ids)} out of vocabulary ({vocab})")

    # ---- generation thread ----

    def _run(self) -> None:
        try:
            while self._round():
                pass
            self._abort_all("shutdown")
        except BaseException as exc:
            log.exception("engine thread crashed")
            self.error = exc
            with self._cv:
                self._stopping = True
            self._abort_all(exc)

    def _round(self) -> bool:
        with self._cv:
            while not (self._waiting or self._updates or self._cancels or self._running):
                if self._stopping:
                    return False
                self._cv.wait()
            if self._stopping:
                return False
            cancels, self._cancels = self._cancels, set()
            updates, self._updates = self._updates, []
            admit = []
            while self._waiting and len(self._running) + len(admit) < self.max_batch_size:
                seq = self._waiting.popleft()
                if seq.id in cancels:
                    self._finish(seq, "abort", abort_reason="cancelled")
                else:
                    admit.append(seq)
        self._apply_cancels(cancels)
        for update in updates:
            self._apply_update(update)
        with torch.inference_mode():
            if admit:
                self._prefill(admit)
            if self._running:
                self._decode_step()
        return True

    def _apply_cancels(self, cancels: set[str]) -> None:
        if not cancels:
            return
        with self._cv:
            for seq in [s for s in self._waiting if s.id in cancels]:
                self._waiting.remove(seq)
                self._finish(seq, "abort", abort_reason="cancelled")
        keep = [i for i, s in enumerate(self._running) if s.id not in cancels]
        for seq in self._running:
            if seq.id in cancels:
                self._finish(seq, "abort", abort_reason="cancelled")
        self._keep(keep)

    def _apply_update(self, update: _Update) -> None:
        t0 = time.monotonic()
        apply_weights(self.model, update.staged)
        self._kv.invalidate()
        aborted = 0
        if update.abort:
            aborted = len(self._running)
            for seq in self._running:
                self._finish(seq, "abort", abort_reason="weight_update")
            self._keep([])
        self.policy_version = update.version
        self.counters.weight_updates += 1
        c, last = self.counters, self._at_last_update
        self._at_last_update = replace(c)
        self._call(update.on_done, UpdateResult(
            update.version, aborted, time.monotonic() - t0, c.decode_steps - last.decode_steps,
            c.decode_rows - last.decode_rows, c.prefill_rounds - last.prefill_rounds,
            c.longest_row_sum - last.longest_row_sum))

    def _prefill(self, seqs: list[_Seq]) -> None:
        for seq in seqs:
            seq.version_start = self.policy_version
        self.counters.prefill_rounds += 1
        self._routing.start()
        logits, cached, routing = self._kv.prefill([s.prompt_ids for s in seqs])
        self._routing.after_prefill(
            [s.id for s in seqs], [len(s.prompt_ids) for s in seqs], cached, routing
        )
        for seq, n in zip(seqs, cached, strict=True):
            seq.cached_tokens = n
            self.counters.prefix_queries += len(seq.prompt_ids)
            self.counters.prefix_hits += n
        self._running += seqs
        out = sample(logits, [s.row for s in seqs])
        finished = {len(self._running) - len(seqs) + i for i in self._emit(seqs, out)}
        self._keep([i for i in range(len(self._running)) if i not in finished])

    def _decode_step(self) -> None:
        running = self._running
        self._routing.start()
        out = self._kv.decode([s.token_ids[-1] for s in running], [s.row for s in running])
        self._routing.after_decode([s.id for s in running])
        self.counters.decode_steps += 1
        self.counters.decode_rows += len(self._running)
        self.counters.longest_row_sum += max(len(s.prompt_ids) + len(s.token_ids) for s in running)
        finished = self._emit(self._running, out)
        self._keep([i for i in range(len(self._running)) if i not in finished])

    def _keep(self, rows: list[int]) -> None:
        routed = {}  # a dropped row parks its routed experts with its K/V (prefix cache)
        if len(rows) < len(self._running):
            kept = set(rows)
            routed = {i: s.routed for i, s in enumerate(self._running) if i not in kept}
        self._kv.keep(rows, routed)
        self._running = [self._running[i] for i in rows]

    def _emit(self, seqs: list[_Seq], out: Sampled) -> set[int]:
        """Record one sampled token per sequence; finish those that end. Returns their rows."""
        self.counters.generation_tokens += len(seqs)
        finished: set[int] = set()
        for i, seq in enumerate(seqs):
            token, p = out.tokens[i], seq.params
            seq.token_ids.append(token)
            seq.logprobs.append(out.logprobs[i])
            if p.top_logprobs:
                seq.top.append(out.top[i])
            if token in p.stop_ids:
                self._finish(seq, "stop", stop_reason=token)
            elif token in self.eos_ids and not p.ignore_eos:
                self._finish(seq, "stop")
            elif len(seq.token_ids) >= min(p.max_tokens, self.max_model_len - len(seq.prompt_ids)):
                self._finish(seq, "length")
            else:
                if seq.on_token is not None:  # a finishing token comes with the result instead
                    self._call_token(
                        seq, token, out.logprobs[i], out.top[i] if p.top_logprobs else None
                    )
                continue
            finished.add(i)
        return finished

    def _finish(
        self,
        seq: _Seq,
        reason: str,
        *,
        stop_reason: int | None = None,
        abort_reason: str | None = None,
    ) -> None:
        self._seqs.pop(seq.id, None)
        seq.routed = self._routing.pop(seq.id)
        self.counters.finished[reason] += 1
        start = self.policy_version if seq.version_start is None else seq.version_start
        result = GenerationResult(
            seq.token_ids,
            seq.logprobs,
            seq.top,
            reason,
            stop_reason,
            abort_reason,
            start,
            self.policy_version,
            len(seq.prompt_ids),
            seq.cached_tokens,
            seq.routed,
        )
        self._call(seq.on_done, result)

    def _abort_all(self, why: str | BaseException) -> None:
        with self._cv:
            seqs = list(self._seqs.values())
            self._waiting.clear()
            updates, self._updates = self._updates, []
        self._running = []
        self._kv.reset()
        for seq in seqs:
            if isinstance(why, BaseException):
                self._seqs.pop(seq.id, None)
                self._call(seq.on_done, EngineDead(f"engine crashed: {why!r}"))
            else:
                self._finish(seq, "abort", abort_reason=why)
        for update in updates:
            self._call(update.on_done, EngineDead(f"engine stopped: {why!r}"))

    @staticmethod
    def _call_token(seq: _Seq, token: int, logprob: float, top: Any) -> None:
        try:
            seq.on_token(token, logprob, top)  # type: ignore[misc]
        except Exception:
            log.exception("token callback failed")
            seq.on_token = None

    @staticmethod
    def _call(callback: Callable[[Any], None], value: Any) -> None:
        try:
            callback(value)
        except Exception:
            log.exception("result callback failed")
