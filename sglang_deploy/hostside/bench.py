#!/usr/bin/env python3
"""Measure an SGLang server from the host it runs on (standard library only; prints JSON on stdout).

    python3 -m hostside.bench --url http://127.0.0.1:30000 [--api-key-file F] [--samples 5] [--warmup 1]
                     [--max-new-tokens 256] [--concurrency 4] [--aggregate-rounds 2]

Single-stream samples: one streaming /generate request at a time, temperature 0, ignore_eos, fixed
max_new_tokens, prompts cycling through a shipped mix of prose, code and chat (MTP acceptance depends
on the text). Per sample: decode tok/s = (completion_tokens - 1) / (e2e - time to first token), both
measured on the client's clock; TTFT; tau = meta_info.spec_accept_length. Then aggregate output tok/s
with `concurrency` parallel streams. Progress goes to stderr.
"""

import argparse
import json
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request

from .lib import acceptance
from .lib.client import MAX_BODY_BYTES, headers, is_simulated, printable, read_api_key, read_bounded, urlopen
from .lib.listener import guard_unit
from .contract.gate import AGGREGATE_ROUNDS, BenchConfig, Measurement, Sample, Summary

PROMPTS = [
    ("prose", "Write a detailed, well-structured essay about the history of the transatlantic telegraph "
              "cable, covering the engineering challenges, the failed attempts, and its effect on commerce."),
    ("code", "Write a Python function that parses an nginx access log line into a dataclass with fields for "
             "the client address, timestamp, method, path, status and bytes sent. Include type hints and tests.\n"
             "```python\nimport re\nfrom dataclasses import dataclass\n"),
    ("chat", "User: I have two GPUs in one server without an NVLink bridge. How should I think about tensor "
             "parallel versus running two replicas of a 27B model? What are the trade-offs?\nAssistant:"),
    ("prose", "Summarise the main arguments for and against building high-speed rail between two cities "
              "500 km apart, for a city council that has to vote on funding next week."),
    ("code", "Implement a thread-safe LRU cache in Go with generics, a capacity limit, and per-entry expiry. "
             "Explain the locking strategy in comments.\n```go\npackage cache\n"),
    ("chat", "User: My sourdough starter smells like nail polish remover. What does that mean and what "
             "should I change in my feeding schedule?\nAssistant:"),
]


MAX_LINE_BYTES = 1 << 20  # one server-sent event: a chunk of tokens and its meta_info


class Client:
    def __init__(self, url, api_key, timeout, request_deadline=None):
        """timeout: the longest silence on a stream (per socket read); request_deadline: the longest one
        request may take in all (a server that trickles keep-alives never trips the first)."""
        self.url = url.rstrip("/")
        self.headers = headers(api_key)
        self.timeout = timeout
        self.request_deadline = request_deadline

    def get_json(self, path):
        request = urllib.request.Request(self.url + path, headers=self.headers)
        with urlopen(request, self.timeout) as response:
            return json.loads(read_bounded(response))

    def generate(self, prompt, max_new_tokens, kind):
        """One streaming request; returns the Sample measured on this client's clock (kind: the prompt's class)."""
        body = json.dumps({"text": prompt, "stream": True, "sampling_params": {
            "max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}}).encode()
        request = urllib.request.Request(self.url + "/generate", data=body, headers=self.headers)
        start = time.perf_counter()
        first = None
        meta = None
        first_tokens = last_tokens = 0
        last = None
        deadline = start + self.request_deadline if self.request_deadline else None
        read = 0
        with urlopen(request, self.timeout) as response:
            while True:
                raw = response.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                read += len(raw)
                if len(raw) > MAX_LINE_BYTES or read > MAX_BODY_BYTES:
                    raise RuntimeError(f"the stream sent a line over {MAX_LINE_BYTES >> 10} KiB or over "
                                       f"{MAX_BODY_BYTES >> 20} MiB in all: not read further")
                if deadline and time.perf_counter() > deadline:
                    raise RuntimeError(f"the request took longer than its deadline of {self.request_deadline:.0f} s")
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = json.loads(payload)
                if "error" in chunk:  # http_server.py streams an error in-band, then [DONE]
                    raise RuntimeError(f"the stream ended with an error: {json.dumps(chunk['error'])[:300]}")
                count = int(chunk.get("meta_info", {}).get("completion_tokens", 0) or 0)
                if first is None and count > 0:
                    first, first_tokens = time.perf_counter(), count
                if count > last_tokens:
                    last, last_tokens = time.perf_counter(), count
                meta = chunk.get("meta_info", meta)
        end = time.perf_counter()
        if meta is None or first is None:
            raise RuntimeError("the stream ended without tokens")
        tokens = int(meta.get("completion_tokens", 0))
        finish = (meta.get("finish_reason") or {}).get("type")
        if finish != "length" or tokens != max_new_tokens:  # ignore_eos: only the length limit ends it
            raise RuntimeError(f"the stream finished with {finish!r} after {tokens} of {max_new_tokens} tokens "
                               "(aborted or cut short)")
        # Tokens counted between the first and the last chunk that carried tokens, on this client's clock: a
        # chunk may carry many tokens (--stream-interval N), so counting from the first *token* would credit
        # the N-1 tokens that arrived with the first chunk to no time at all.
        if last is None or last <= first or last_tokens <= first_tokens:
            raise RuntimeError(f"the stream carried its {tokens} tokens in one chunk: no decode rate can be measured "
                               "(a --stream-interval as large as max_new_tokens?)")
        return Sample(
            kind=kind,
            completion_tokens=tokens,
            e2e_s=end - start,
            ttft_s=first - start,
            decode_tok_s=(last_tokens - first_tokens) / (last - first),
            accept_length=meta.get("spec_accept_length"),
            correct_drafts_histogram=meta.get("spec_correct_drafts_histogram"),  # acceptance.py reads it
            server_e2e_s=meta.get("e2e_latency"),
        )


def summary(values):
    """The Summary of one metric over the samples; None: no value."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    median = statistics.median(values)
    return Summary(
        median=median, min=min(values), max=max(values), n=len(values), values=values,
        spread_pct=(max(values) - min(values)) / median * 100 if median else 0.0,
        cv_pct=statistics.pstdev(values) / statistics.mean(values) * 100 if len(values) > 1 and statistics.mean(values) else 0.0,
    )


def measurement(url, server_info, config, samples, aggregates, errors, duration_s):
    """The bench's answer, through its class (a field renamed here fails at the write)."""
    return Measurement(
        url=url,
        simulated=is_simulated(server_info),
        sglang_version=server_info.get("version"),
        config=config,
        samples=samples,
        decode_tok_s=summary([s.decode_tok_s for s in samples]),
        ttft_s=summary([s.ttft_s for s in samples]),
        accept_length=summary([s.accept_length for s in samples]),
        acceptance=acceptance.summary(samples),
        aggregate_tok_s=summary(aggregates),
        errors=errors,
        duration_s=duration_s,
    )


def aggregate_round(client, concurrency, max_new_tokens, offset, errors):
    results = [None] * concurrency

    def worker(i):
        kind, prompt = PROMPTS[(offset + i) % len(PROMPTS)]
        try:
            results[i] = client.generate(prompt, max_new_tokens, kind)
        except (urllib.error.URLError, OSError, RuntimeError, ValueError) as error:
            errors.append(f"aggregate stream {i}: {printable(error)}")

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    done = [r for r in results if r]
    return sum(r.completion_tokens for r in done) / wall if done and len(done) == concurrency else None


def progress(message):
    print(message, file=sys.stderr, flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--api-key-file")
    parser.add_argument("--service", help="send the key only over connections this unit's processes accepted")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--aggregate-rounds", type=int, default=AGGREGATE_ROUNDS)
    parser.add_argument("--timeout", type=float, default=300, help="longest silence on a stream (s)")
    parser.add_argument("--request-deadline", type=float, help="longest one request may take (s); default: "
                        "60 s + 1 s per token")
    args = parser.parse_args()

    if args.service:
        guard_unit(args.service)
    deadline = args.request_deadline or 60 + args.max_new_tokens
    client = Client(args.url, read_api_key(args.api_key_file), args.timeout, deadline)
    errors = []
    started = time.perf_counter()
    try:
        server_info = client.get_json("/server_info")
    except (urllib.error.URLError, OSError, ValueError) as error:
        server_info = {}
        errors.append(f"/server_info: {printable(error)}")

    for i in range(args.warmup):
        progress(f"warmup {i + 1}/{args.warmup}")
        try:
            client.generate(PROMPTS[i % len(PROMPTS)][1], min(64, args.max_new_tokens), PROMPTS[i % len(PROMPTS)][0])
        except (urllib.error.URLError, OSError, RuntimeError, ValueError) as error:
            errors.append(f"warmup {i + 1}: {printable(error)}")

    samples = []
    for i in range(args.samples):
        kind, prompt = PROMPTS[i % len(PROMPTS)]
        try:
            sample = client.generate(prompt, args.max_new_tokens, kind)
        except (urllib.error.URLError, OSError, RuntimeError, ValueError) as error:
            errors.append(f"sample {i + 1}: {printable(error)}")
            progress(f"sample {i + 1}/{args.samples} ({kind}): error {printable(error)}")
            continue
        sample = sample.but(position=i)
        samples.append(sample)
        tau = sample.accept_length
        progress(f"sample {i + 1}/{args.samples} ({kind}): {sample.decode_tok_s:.1f} tok/s, "
                 f"TTFT {sample.ttft_s * 1000:.0f} ms" + (f", tau {tau:.2f}" if tau else ""))

    aggregates = []
    if args.concurrency > 1:
        for r in range(args.aggregate_rounds):
            value = aggregate_round(client, args.concurrency, args.max_new_tokens, r, errors)
            aggregates.append(value)
            progress(f"aggregate {r + 1}/{args.aggregate_rounds} at concurrency {args.concurrency}: "
                     + (f"{value:.1f} tok/s" if value else "failed"))

    config = BenchConfig(samples=args.samples, warmup=args.warmup, max_new_tokens=args.max_new_tokens,
                         concurrency=args.concurrency, aggregate_rounds=args.aggregate_rounds)
    print(measurement(args.url, server_info, config, samples, aggregates, errors, time.perf_counter() - started).dump(),
          end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
