"""Prometheus metrics of one server (`GET /metrics`), with vLLM's names under a `localspec:` prefix.

Each app owns its own `CollectorRegistry` (never the global one), so several apps in one
process (tests) do not mix counts. Counters appear with a `_total` suffix in the text
format, exactly as vLLM's do (`vllm:spec_decode_num_drafts` -> `..._total`):

    localspec:http_requests_total{endpoint, status}            every HTTP request
    localspec:http_request_duration_seconds{endpoint}          histogram, until the body ends
    localspec:request_success_total{finished_reason}           finished generations
    localspec:prompt_tokens_total / generation_tokens_total
    localspec:e2e_request_latency_seconds                      histogram, queue wait included
    localspec:time_to_first_token_seconds                      histogram (streaming and not)
    localspec:request_queue_time_seconds                       histogram
    localspec:num_requests_running / num_requests_waiting      gauges
    localspec:numerics_mode{mode}                              info gauge: the target's numerics mode, = 1
    localspec:spec_decode_num_drafts_total
    localspec:spec_decode_num_draft_tokens_total
    localspec:spec_decode_num_accepted_tokens_total
    localspec:spec_decode_num_accepted_tokens_per_pos_total{position="i"}
    localspec:spec_decode_num_drafted_tokens_per_pos_total{position="i"}
    localspec:spec_decode_num_steps_by_drafter_total{drafter}   steps per mechanism (model, ngram, eagle3, ..., none)
    localspec:spec_decode_num_steps_by_gamma_total{gamma}      steps per draft length chosen (0 = plain)
    localspec:num_parallel_slots                               gauge: generations that run at once (--parallel)
    localspec:batch_num_steps_total / batch_num_sequences_total  batched target calls and the sequences
                                                               verified in them (mean batch = ratio)

Acceptance rate = accepted / draft tokens; mean acceptance length = 1 + accepted / drafts
(the same definitions as `SpecStats`, which is the only source of these numbers).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from localspec.engine import SpecStats

PREFIX = "localspec:"
CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
_TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0)


class ServerMetrics:
    """The counters, gauges and histograms of one app, in their own registry."""

    def __init__(self, numerics: str = "exact") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r, p = self.registry, PREFIX
        self.http_requests = Counter(f"{p}http_requests", "HTTP requests by route and status.",
                                     ["endpoint", "status"], registry=r)
        self.http_duration = Histogram(f"{p}http_request_duration_seconds", "HTTP request duration (until the "
                                       "last body byte).", ["endpoint"], buckets=_LATENCY_BUCKETS, registry=r)
        self.request_success = Counter(f"{p}request_success", "Finished generations by finish reason.",
                                       ["finished_reason"], registry=r)
        self.prompt_tokens = Counter(f"{p}prompt_tokens", "Prompt tokens processed.", registry=r)
        self.generation_tokens = Counter(f"{p}generation_tokens", "Tokens generated.", registry=r)
        self.e2e_latency = Histogram(f"{p}e2e_request_latency_seconds", "Generation request latency, queue "
                                     "wait included.", buckets=_LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram(f"{p}time_to_first_token_seconds", "Time to the first generated token.",
                              buckets=_TTFT_BUCKETS, registry=r)
        self.queue_time = Histogram(f"{p}request_queue_time_seconds", "Time spent waiting for the engine.",
                                    buckets=_LATENCY_BUCKETS, registry=r)
        self.running = Gauge(f"{p}num_requests_running", "Generations running (up to --parallel).", registry=r)
        self.slots = Gauge(f"{p}num_parallel_slots", "Generations that run at once (--parallel).", registry=r)
        self.slots.set(1)
        self.steps_by_gamma = Counter(f"{p}spec_decode_num_steps_by_gamma", "Steps per draft length "
                                      "(0 = a plain step).", ["gamma"], registry=r)
        self.batch_steps = Counter(f"{p}batch_num_steps", "Target calls of finished generations' steps.",
                                   registry=r)
        self.batch_sequences = Counter(f"{p}batch_num_sequences", "Sequences verified in those calls, "
                                       "summed over the steps of finished generations.", registry=r)
        self.waiting = Gauge(f"{p}num_requests_waiting", "Requests waiting for the engine.", registry=r)
        self.numerics = Gauge(f"{p}numerics_mode", "Numerics mode the target runs in (exact or fast).",
                              ["mode"], registry=r)
        self.numerics.labels(mode=numerics).set(1.0)
        self.num_drafts = Counter(f"{p}spec_decode_num_drafts", "Speculative steps that drafted tokens.",
                                  registry=r)
        self.num_draft_tokens = Counter(f"{p}spec_decode_num_draft_tokens", "Draft tokens proposed.", registry=r)
        self.num_accepted_tokens = Counter(f"{p}spec_decode_num_accepted_tokens", "Draft tokens accepted.",
                                           registry=r)
        self.accepted_per_pos = Counter(f"{p}spec_decode_num_accepted_tokens_per_pos",
                                        "Accepted draft tokens at each draft position.", ["position"], registry=r)
        self.drafted_per_pos = Counter(f"{p}spec_decode_num_drafted_tokens_per_pos",
                                       "Draft tokens proposed at each draft position.", ["position"], registry=r)
        self.steps_by_drafter = Counter(f"{p}spec_decode_num_steps_by_drafter",
                                        "Steps per drafting mechanism (none = a plain step).", ["drafter"], registry=r)

    def observe_http(self, endpoint: str, status: int, seconds: float) -> None:
        """Count one HTTP request (endpoint = the route template, never the raw path)."""
        self.http_requests.labels(endpoint=endpoint, status=str(status)).inc()
        self.http_duration.labels(endpoint=endpoint).observe(seconds)

    def observe_generation(self, stats: SpecStats, finish_reason: str, e2e_s: float,
                           ttft_s: float | None, queue_s: float) -> None:
        """Add one finished (or cancelled) generation's stats."""
        self.request_success.labels(finished_reason=finish_reason).inc()
        self.prompt_tokens.inc(stats.num_prompt_tokens)
        self.generation_tokens.inc(stats.num_generated_tokens)
        self.e2e_latency.observe(e2e_s)
        if ttft_s is not None:
            self.ttft.observe(ttft_s)
        self.queue_time.observe(queue_s)
        self.num_drafts.inc(stats.num_drafts)
        self.num_draft_tokens.inc(stats.num_draft_tokens)
        self.num_accepted_tokens.inc(stats.num_accepted_tokens)
        for i, n in enumerate(stats.accepted_per_position):
            self.accepted_per_pos.labels(position=str(i)).inc(n)
        for i, n in enumerate(stats.drafted_per_position):
            self.drafted_per_pos.labels(position=str(i)).inc(n)
        for name, n in stats.drafter_counts.items():
            self.steps_by_drafter.labels(drafter=name).inc(n)
        for k, n in stats.gamma_counts.items():
            self.steps_by_gamma.labels(gamma=str(k)).inc(n)
        self.batch_steps.inc(stats.num_steps)
        self.batch_sequences.inc(stats.batch_sequences)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
