#!/usr/bin/env python3
"""Tests `qwen3tts serve` with real HTTP clients on loopback (stdlib only).

    serve_test.py QWEN3TTS MODEL_DIR

Starts the server on a free port and checks: /health and /metrics; one streamed request's PCM equals
`qwen3tts synth` of the same text and seed byte for byte (and the whole-file answer equals synth's WAV file);
100 concurrent streaming clients, a third of which hang up mid-stream: the server cancels those, gives back
every KV block and codec slot, and the others' audio equals a run without the hang-ups; every malformed
request gets a 4xx JSON error and changes no outcome count but `rejected`; a seeded fuzz of the JSON body
gets only 2xx/4xx answers and leaves the server up; `qwen3tts loadgen` (the same closed loop in process)
prints its rows, and a checkpoint with min_new_tokens = max_new_tokens makes every request that many frames;
a second server on the first one's port fails to bind; --language reaches the requests; --device chooses the
backend; every usage error of qwen3tts exits 2. Every server, synth and loadgen here runs on the host backend
(--device host), on a GPU machine too.
"""
import gzip
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

QWEN3TTS, MODEL = sys.argv[1], sys.argv[2]
# The host backend everywhere: its samples are synth's byte for byte whatever the batch. On a GPU the defaults
# (device auto) would serve on CUDA, whose codec math in the server is not synth's (docs/serve.md).
HOST = ["--device", "host"]
VOICE = "vivian"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


class Server:
    def __init__(self, *extra):
        self.proc = subprocess.Popen([QWEN3TTS, "serve", "--model", MODEL, "--port", "0", *HOST, *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on http://([0-9.]+):(\d+)", line)
        if not m:
            self.proc.kill()
            raise SystemExit("the server did not print its address; stdout: %r stderr: %s" %
                             (line, self.proc.stderr.read()))
        self.host, self.port = m.group(1), int(m.group(2))

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.getheader("Content-Type", ""), r.read()
        finally:
            c.close()

    def speech(self, body, **kw):
        return self.request("POST", "/v1/audio/speech", json.dumps(body).encode(),
                            {"Content-Type": "application/json"}, **kw)

    def metrics(self):
        status, _, text = self.request("GET", "/metrics")
        assert status == 200, status
        out = {}
        for line in text.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


def synth_wav(text, seed, frames, *extra):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "a.wav")
        subprocess.run([QWEN3TTS, "synth", "--model", MODEL, "--speaker", VOICE, "--text", text, "--seed", str(seed),
                        "--max-frames", str(frames), "--out", out, *HOST, *extra], check=True, capture_output=True)
        with open(out, "rb") as f:
            return f.read()


def wav_data(wav):
    """The data chunk's bytes of a RIFF/WAVE file (sizes may be the streaming 0xFFFFFFFF)."""
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE", wav[:12]
    at = 12
    while at + 8 <= len(wav):
        tag, size = wav[at:at + 4], struct.unpack("<I", wav[at + 4:at + 8])[0]
        if tag == b"data":
            return wav[at + 8:] if size == 0xFFFFFFFF else wav[at + 8:at + 8 + size]
        at += 8 + size
    raise AssertionError("no data chunk")


def stream(srv, body, hang_up_after=None):
    """Streams a request over a raw socket; with hang_up_after, closes the connection once that many body bytes
    came. Returns (complete, body bytes): complete when the final chunk arrived."""
    s = socket.create_connection((srv.host, srv.port), timeout=60)
    payload = json.dumps(body).encode()
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
    f = s.makefile("rb")
    status = f.readline()
    assert b" 200 " in status, status
    while f.readline() not in (b"\r\n", b""):
        pass
    complete, got = read_chunks(f, hang_up_after)
    f.close()
    s.close()
    return complete, got


def read_chunks(f, hang_up_after=None):
    """A chunked body's bytes from file f (past the headers): (whether the final chunk came, the bytes), stopping
    early once hang_up_after bytes came."""
    got = bytearray()
    while True:
        size_line = f.readline()
        if not size_line:
            return False, bytes(got)
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return True, bytes(got)
        got += f.read(size)
        f.readline()
        if hang_up_after is not None and len(got) >= hang_up_after:
            return False, bytes(got)


def wait_idle(srv, seconds=30):
    deadline = time.time() + seconds
    while True:
        m = srv.metrics()
        if (m["qwen3tts_live_requests"] == 0 and m["qwen3tts_queued_requests"] == 0 and
                m["qwen3tts_kv_free_blocks"] == m["qwen3tts_kv_blocks"] and
                m["qwen3tts_codec_free_slots"] == m["qwen3tts_codec_slots"]) or time.time() > deadline:
            return m
        time.sleep(0.1)


def outcome(m, what):
    return m['qwen3tts_requests_total{outcome="%s"}' % what]


def test_health_and_metrics(srv):
    status, ctype, body = srv.request("GET", "/health")
    h = json.loads(body)
    check(status == 200 and ctype.startswith("application/json"), "GET /health answers 200 JSON")
    check(h.get("model") == MODEL and h.get("tts_model_type") == "custom_voice",
          "/health names the model folder and the checkpoint type: %r" % h)
    check(h.get("voices") == ["dylan", "vivian"] and h.get("language") == "auto",
          "/health lists the checkpoint's voices and the language: %r" % h)
    m = srv.metrics()
    for name in ["qwen3tts_live_requests", "qwen3tts_queued_requests", "qwen3tts_first_audio_seconds_count",
                 "qwen3tts_chunk_gap_seconds_count", "qwen3tts_audio_seconds_total", "qwen3tts_kv_free_blocks",
                 "qwen3tts_codec_free_slots", "qwen3tts_lane_on_share", 'qwen3tts_requests_total{outcome="rejected"}',
                 "qwen3tts_gpu_busy_seconds_total", "qwen3tts_gpu_busy_fraction"]:
        check(name in m, "/metrics has %s" % name)


def test_listen_backlog(srv):
    """The server listens with a backlog of SOMAXCONN, not cpp-httplib 0.11's 5: c clients connecting at once
    would overflow an accept queue of 5, and the kernel then delays a handshake by a second or resets it."""
    ss = shutil.which("ss")
    if ss is None:
        print("note: no `ss` (iproute2) here: the listen backlog is not read")
        return
    out = subprocess.run([ss, "-ltnH", "sport = :%d" % srv.port], capture_output=True, text=True).stdout.split()
    # ss -ltn: State Recv-Q Send-Q Local Peer; for a listening socket Send-Q is its backlog.
    check(len(out) >= 3 and out[2].isdigit() and int(out[2]) >= 128,
          "the server's listening socket has a backlog of at least 128: %r" % out)


def test_equal_to_synth(srv):
    text, seed, frames = "Hello there, this is a test.", 5, 30
    ref = synth_wav(text, seed, frames)
    body = {"model": "qwen3-tts", "input": text, "voice": VOICE, "seed": seed, "max_frames": frames}
    complete, pcm = stream(srv, dict(body, stream=True, response_format="pcm"))
    check(complete and len(pcm) > 0, "a streamed pcm request completes with audio")
    check(pcm == wav_data(ref), "streamed PCM equals synth's samples byte for byte (%d vs %d bytes)" %
          (len(pcm), len(wav_data(ref))))
    complete, wav = stream(srv, dict(body, stream=True))
    check(complete and wav[4:8] == b"\xff\xff\xff\xff" and wav[40:44] == b"\xff\xff\xff\xff",
          "a streamed WAV's header has the streaming sizes 0xFFFFFFFF")
    check(wav_data(wav) == wav_data(ref), "streamed WAV samples equal synth's")
    m = srv.metrics()
    check(m.get("qwen3tts_gpu_busy_seconds_total", 0) > 0,
          "after two requests the worker's busy time is above 0: %r" % m.get("qwen3tts_gpu_busy_seconds_total"))
    check(0 < m.get("qwen3tts_gpu_busy_fraction", 0) <= 1,
          "the busy fraction is in (0, 1]: %r" % m.get("qwen3tts_gpu_busy_fraction"))
    # OpenAI's speed 1 and stream_format "audio" change nothing: the same samples, streamed.
    complete, pcm = stream(srv, dict(body, speed=1.0, stream_format="audio", response_format="pcm"))
    check(complete and pcm == wav_data(ref), "speed 1 and stream_format audio stream synth's samples")
    status, ctype, whole = srv.speech(body)
    check(status == 200 and ctype == "audio/wav" and whole == ref,
          "the whole-file answer equals synth's WAV file byte for byte")
    # An HTTP/1.0 client (nginx's default towards its upstream) has no chunked transfer: the stream comes as the bytes
    # themselves, ended by the connection's end.
    payload = json.dumps(dict(body, stream=True, response_format="pcm")).encode()
    s = socket.create_connection((srv.host, srv.port), timeout=60)
    s.sendall(b"POST /v1/audio/speech HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(payload) + payload)
    answer = b""
    while True:
        got = s.recv(65536)
        if not got:
            break
        answer += got
    s.close()
    head, _, data = answer.partition(b"\r\n\r\n")
    check(b" 200 " in head.split(b"\r\n")[0] and b"chunked" not in head.lower(),
          "an HTTP/1.0 stream is not chunked: %r" % head)
    check(data == wav_data(ref), "an HTTP/1.0 stream's bytes, to the connection's end, equal synth's samples "
          "(%d vs %d bytes)" % (len(data), len(wav_data(ref))))


def test_hang_ups(srv):
    n = 100
    texts = ["One sentence.", "Another, somewhat longer sentence for the server.", "Short.", "Numbers: 1, 2, 3."]
    bodies = [{"model": "m", "input": texts[i % 4], "voice": VOICE, "seed": i, "stream": True,
               "response_format": "pcm", "max_frames": 12 + i % 5} for i in range(n)]
    hang = set(range(0, n, 3))  # 34 clients hang up
    for i in hang:  # seed 7 runs this text to the frame limit (tiny06): the hang-up comes well before the end
        bodies[i].update(input="One sentence.", seed=7, max_frames=400)
    before = srv.metrics()
    results = [None] * n

    def client(i):
        try:
            results[i] = stream(srv, bodies[i], hang_up_after=2 if i in hang else None)
        except Exception as e:  # noqa: BLE001 - reported as a failure below
            results[i] = e

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception)]
    check(not errors, "every client got an answer: %r" % errors[:3])
    cut = sum(1 for i in hang if not isinstance(results[i], Exception) and not results[i][0])
    check(cut == len(hang), "every hanging-up client left mid-stream (%d of %d)" % (cut, len(hang)))
    m = wait_idle(srv)
    check(m["qwen3tts_live_requests"] == 0 and m["qwen3tts_queued_requests"] == 0, "no live or queued request left")
    check(m["qwen3tts_kv_free_blocks"] == m["qwen3tts_kv_blocks"], "every KV block is free again")
    check(m["qwen3tts_codec_free_slots"] == m["qwen3tts_codec_slots"], "every codec slot is free again")
    check(outcome(m, "cancelled") - outcome(before, "cancelled") == len(hang),
          "the hang-ups were cancelled: %d" % (outcome(m, "cancelled") - outcome(before, "cancelled")))
    check(outcome(m, "completed") - outcome(before, "completed") == n - len(hang), "the others completed")
    # The same requests again, nobody hanging up (fewer at once: order and batching must not matter).
    kept = [i for i in range(n) if i not in hang]
    again = {}

    def client2(i):
        again[i] = stream(srv, bodies[i])

    for at in range(0, len(kept), 20):
        ts = [threading.Thread(target=client2, args=(i,)) for i in kept[at:at + 20]]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    same = sum(1 for i in kept if results[i][0] and again[i][0] and results[i][1] == again[i][1])
    check(same == len(kept), "the others' audio equals a run without hang-ups (%d of %d)" % (same, len(kept)))


def test_malformed(srv):
    good = {"model": "m", "input": "Hi.", "voice": VOICE, "max_frames": 2}
    cases = [
        ("POST", "/v1/audio/speech", b"{not json", 400, None),
        ("POST", "/v1/audio/speech", b"[1, 2]", 400, None),
        ("POST", "/v1/audio/speech", b"", 400, None),
        ("POST", "/v1/audio/speech", dict(good, model=3), 400, "model"),
        ("POST", "/v1/audio/speech", {k: v for k, v in good.items() if k != "input"}, 400, "input"),
        ("POST", "/v1/audio/speech", dict(good, input=""), 400, "input"),
        ("POST", "/v1/audio/speech", dict(good, input=7), 400, "input"),
        ("POST", "/v1/audio/speech", dict(good, input="x" * 5000), 400, "input"),
        ("POST", "/v1/audio/speech", dict(good, voice="nobody"), 400, "voice"),
        ("POST", "/v1/audio/speech", dict(good, voice=None), 400, "voice"),
        ("POST", "/v1/audio/speech", {k: v for k, v in good.items() if k != "voice"}, 400, "voice"),
        ("POST", "/v1/audio/speech", dict(good, response_format="mp3"), 400, "response_format"),
        ("POST", "/v1/audio/speech", dict(good, stream="yes"), 400, "stream"),
        ("POST", "/v1/audio/speech", dict(good, seed=-1), 400, "seed"),
        ("POST", "/v1/audio/speech", dict(good, seed=1.5), 400, "seed"),
        ("POST", "/v1/audio/speech", dict(good, max_frames=0), 400, "max_frames"),
        ("POST", "/v1/audio/speech", dict(good, max_frames=100000), 400, "max_frames"),
        ("POST", "/v1/audio/speech", dict(good, instructions=5), 400, "instructions"),
        ("POST", "/v1/audio/speech", dict(good, speed=1.5), 400, "speed"),
        ("POST", "/v1/audio/speech", dict(good, speed="1"), 400, "speed"),
        ("POST", "/v1/audio/speech", dict(good, stream_format="sse"), 400, "stream_format"),
        ("POST", "/v1/audio/speech", dict(good, stream_format=1), 400, "stream_format"),
        ("POST", "/v1/audio/speech", dict(good, speeds=1.0), 400, "speeds"),
        ("POST", "/v1/audio/speech", b"{\"input\": \"" + b"x" * 70000 + b"\"}", 413, None),
        ("GET", "/v1/audio/speech", None, 405, None),
        ("DELETE", "/health", None, 405, None),
        ("GET", "/nowhere", None, 404, None),
        ("POST", "/v1/audio/other", b"{}", 404, None),
    ]
    before = srv.metrics()
    for method, path, body, want, param in cases:
        raw = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        status, ctype, answer = srv.request(method, path, raw, {"Content-Type": "application/json"})
        what = "%s %s %s" % (method, path, (raw or b"")[:60])
        try:
            err = json.loads(answer)["error"]
            shaped = isinstance(err["message"], str) and isinstance(err["type"], str) and "param" in err
        except (ValueError, KeyError, TypeError):
            err, shaped = {}, False
        check(status == want, "%s answers %d (got %d: %r)" % (what, want, status, answer[:200]))
        check(shaped and ctype.startswith("application/json"), "%s answers a JSON error object" % what)
        if param:
            check(err.get("param") == param, "%s names param %s (got %r)" % (what, param, err.get("param")))
    after = srv.metrics()
    for o in ("completed", "cancelled", "failed"):
        check(outcome(after, o) == outcome(before, o), "malformed requests change no %s count" % o)
    check(outcome(after, "rejected") - outcome(before, "rejected") == len(cases),
          "each malformed request counts as rejected (%d of %d)" %
          (outcome(after, "rejected") - outcome(before, "rejected"), len(cases)))


def test_body_bounds(srv):
    """--max-body bounds every body as the server reads it: a chunked one and the inflated bytes of a gzip one get
    413 too (cpp-httplib alone bounds only a Content-Length body, and read those whole into memory), the rest of
    an oversized body is read and dropped so that the kept-alive connection answers its next request, and a POST
    without Content-Length or Transfer-Encoding has an empty body (no wait for the read timeout). 405 answers
    name the allowed methods in Allow, OPTIONS included."""
    good = json.dumps({"model": "m", "input": "Hi.", "voice": VOICE, "max_frames": 2}).encode()
    before = srv.metrics()
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
    try:
        c.request("POST", "/v1/audio/speech", body=(b"x" * 65536 for _ in range(32)), encode_chunked=True,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        answer = r.read()
        check(r.status == 413 and b"--max-body" in answer,
              "a 2 MiB chunked body gets 413 naming --max-body (got %d: %r)" % (r.status, answer[:200]))
        c.request("POST", "/v1/audio/speech", body=good, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        check(r.status == 200 and r.read()[:4] == b"RIFF", "the connection answers its next request after the 413")
    finally:
        c.close()
    bomb = gzip.compress(json.dumps({"model": "m", "input": "x" * (8 << 20), "voice": VOICE}).encode())
    status, _, answer = srv.request("POST", "/v1/audio/speech", bomb,
                                    {"Content-Type": "application/json", "Content-Encoding": "gzip"})
    check(status == 413, "a %d-byte gzip body of 8 MiB gets 413 (got %d: %r)" % (len(bomb), status, answer[:200]))
    status, _, answer = srv.request("POST", "/v1/audio/speech", gzip.compress(good),
                                    {"Content-Type": "application/json", "Content-Encoding": "gzip"})
    check(status == 200 and answer[:4] == b"RIFF", "a gzip body within the bound is answered (got %d)" % status)
    s = socket.create_connection((srv.host, srv.port), timeout=30)
    t = time.time()
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = s.makefile("rb").read()
    s.close()
    check(b" 400 " in answer.split(b"\r\n")[0] and time.time() - t < 2,
          "a POST without a length is an empty body, refused at once (%.1f s: %r)" % (time.time() - t, answer[:80]))
    for method, path, allow in (("OPTIONS", "/v1/audio/speech", "POST"), ("PUT", "/health", "GET, HEAD"),
                                ("GET", "/v1/audio/speech", "POST")):
        c = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
        c.request(method, path, body=b"{}" if method == "PUT" else None)
        r = c.getresponse()
        r.read()
        c.close()
        check(r.status == 405 and r.getheader("Allow") == allow,
              "%s %s answers 405 with Allow: %s (got %d, %r)" % (method, path, allow, r.status, r.getheader("Allow")))
    after = srv.metrics()
    for o in ("completed", "cancelled", "failed"):
        check(outcome(after, o) - outcome(before, o) == (2 if o == "completed" else 0),
              "the bounds change no %s count but the two good requests'" % o)
    check(outcome(after, "rejected") - outcome(before, "rejected") == 6,
          "each refusal counts as rejected (%d of 6)" % (outcome(after, "rejected") - outcome(before, "rejected")))


def test_idle_connections(srv):
    """100 connections that send nothing (fewer than the pool's live + queued + 16 threads) leave /health answering
    well before the idle connections' 5 s timeout."""
    idle = [socket.create_connection((srv.host, srv.port), timeout=30) for _ in range(100)]
    try:
        t = time.time()
        status, _, _ = srv.request("GET", "/health", timeout=30)
        took = time.time() - t
        # A starved pool would answer only once idle connections time out (5 s); 3 s leaves a loaded machine room.
        check(status == 200 and took < 3, "/health answers within 3 s beside 100 idle connections (%d in %.1f s)"
              % (status, took))
    finally:
        for s in idle:
            s.close()


def test_fuzz(srv, seconds=8.0, seed=1234):
    rng = random.Random(seed)
    good = json.dumps({"model": "m", "input": "Hi there.", "voice": VOICE, "max_frames": 2, "seed": 3,
                       "response_format": "pcm", "stream": False})
    alphabet = b'{}[]":,0123456789-.eE truefalsnul\\\x00\xff\xc3abcxyz'
    n = bad = 0
    end = time.time() + seconds
    while time.time() < end:
        b = bytearray(good.encode())
        for _ in range(rng.randint(1, 4)):
            op, at = rng.randrange(3), rng.randrange(len(b) + 1)
            if op == 0 and b:
                del b[min(at, len(b) - 1)]
            elif op == 1:
                b.insert(at, rng.choice(alphabet))
            elif b:
                b[min(at, len(b) - 1)] = rng.choice(alphabet)
        status, _, _ = srv.request("POST", "/v1/audio/speech", bytes(b), {"Content-Type": "application/json"})
        n += 1
        if not (200 <= status < 300 or 400 <= status < 500):
            bad += 1
            check(False, "fuzzed body %r answered %d" % (bytes(b), status))
    check(bad == 0, "%d fuzzed bodies, every answer 2xx or 4xx" % n)
    status, _, _ = srv.request("GET", "/health")
    check(status == 200 and srv.proc.poll() is None, "the server is up after the fuzz")


def test_loadgen_http(srv):
    before = srv.metrics()
    out = subprocess.run([QWEN3TTS, "loadgen-http", "--url", "http://%s:%d" % (srv.host, srv.port), "-c", "4",
                          "-n", "16", "--voice", VOICE, "--max-frames", "40"], capture_output=True, text=True,
                         timeout=60)
    check(out.returncode == 0, "loadgen-http exits 0: %s" % out.stderr)
    row = [line for line in out.stdout.splitlines() if re.search(r"\|\s+4 \|\s+16 \|", line)]
    check(len(row) == 1, "loadgen-http prints its table row: %r" % out.stdout)
    if row:
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        check(cells[0] == "mstar-http" and cells[1] == "on" and cells[4] == "16" and cells[5] == "0" and
              float(cells[6]) > 0, "16 requests ok, none failed, audio produced, the server's lane named: %r" % cells)
    after = srv.metrics()
    check(outcome(after, "completed") - outcome(before, "completed") == 16, "the server completed the 16 requests")
    url = "http://%s:%d" % (srv.host, srv.port)
    out = subprocess.run([QWEN3TTS, "loadgen-http", "--url", url, "-c", "1", "-n", "2", "--voice", "nobody"],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 1 and "HTTP 400: " in out.stderr and
          "this checkpoint's voices: dylan, vivian" in out.stderr,
          "loadgen-http prints the server's refusal: %r" % out.stderr)
    out = subprocess.run([QWEN3TTS, "loadgen-http", "--url", url, "-c", "1", "-n", "2", "--max-frames", "10"],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 0 and "voice: dylan" in out.stdout,
          "loadgen-http without --voice takes the first voice /health lists: %r %r" % (out.stdout, out.stderr))


def test_second_server_same_port(srv):
    """A second server on the port the first listens on fails to bind (cpp-httplib's default SO_REUSEPORT let it
    bind, the kernel splitting the connections between the two)."""
    second = subprocess.Popen([QWEN3TTS, "serve", "--model", MODEL, "--port", str(srv.port), *HOST],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = second.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # it listens: stop it
        second.kill()
        _, err = second.communicate()
    check(second.returncode == 1 and "cannot bind 127.0.0.1:%d (in use" % srv.port in err,
          "a second server on the same port exits 1 naming it: %r %r" % (second.returncode, err))
    status, _, _ = srv.request("GET", "/health")
    check(status == 200, "the first server still answers")


def fixed_frames_copy(scratch, tokens):
    """A copy of MODEL in scratch whose generation_config.json sets min_new_tokens = max_new_tokens = tokens, so that
    every request makes tokens - 1 frames (or its max_frames); its path."""
    model = os.path.join(scratch, "fixed")
    shutil.copytree(MODEL, model)
    gen_path = os.path.join(model, "generation_config.json")
    gen = json.load(open(gen_path))
    gen["max_new_tokens"] = gen["min_new_tokens"] = tokens
    json.dump(gen, open(gen_path, "w"))
    return model


def test_whole_file_hang_up(srv):
    """A client of a whole-file (not streaming) answer that hangs up while its request runs cancels it: the request
    counts as cancelled, not completed, and every KV block and codec slot is free again. srv makes 2000 frames a
    request (test_stop_drains' checkpoint), seconds of work even on a fast machine."""
    before = srv.metrics()
    body = json.dumps({"model": "m", "input": "Hi.", "voice": VOICE, "response_format": "pcm",
                       "max_frames": 2000}).encode()
    s = socket.create_connection((srv.host, srv.port), timeout=60)
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    deadline = time.time() + 30
    while srv.metrics()["qwen3tts_live_requests"] == 0 and time.time() < deadline:
        time.sleep(0.02)
    s.close()
    m = wait_idle(srv)
    check(outcome(m, "cancelled") == outcome(before, "cancelled") + 1 and
          outcome(m, "completed") == outcome(before, "completed"),
          "a whole-file client's hang-up cancels its request (cancelled %d -> %d, completed %d -> %d)" %
          (outcome(before, "cancelled"), outcome(m, "cancelled"), outcome(before, "completed"), outcome(m, "completed")))
    check(m["qwen3tts_live_requests"] == 0 and m["qwen3tts_kv_free_blocks"] == m["qwen3tts_kv_blocks"] and
          m["qwen3tts_codec_free_slots"] == m["qwen3tts_codec_slots"],
          "after a whole-file client's hang-up no request is live and every KV block and codec slot is free")


def test_stop_drains():
    """SIGTERM stops the server gracefully: a stream in progress runs to its final chunk, meanwhile a new request
    gets 503 and /health says "stopping" with 503, and the server then exits 0. The requests run a fixed 2000 frames
    (a copy of the checkpoint with min_new_tokens = max_new_tokens), so that the stream is still going."""
    global MODEL
    keep = MODEL
    with tempfile.TemporaryDirectory() as scratch:
        MODEL = fixed_frames_copy(scratch, 8000)
        srv = Server("--max-frames", "2000")
        try:
            test_whole_file_hang_up(srv)
            body = json.dumps({"model": "m", "input": "Hi.", "voice": VOICE, "stream": True, "response_format": "pcm",
                               "max_frames": 2000}).encode()
            s = socket.create_connection((srv.host, srv.port), timeout=60)
            s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
                      % len(body) + body)
            f = s.makefile("rb")
            check(b" 200 " in f.readline(), "the stream starts")
            while f.readline() not in (b"\r\n", b""):
                pass
            f.read(int(f.readline().split(b";")[0], 16) + 2)  # the first chunk: the request is in flight
            srv.proc.send_signal(signal.SIGTERM)
            health = None
            for _ in range(40):
                try:
                    status, _, answer = srv.request("GET", "/health", timeout=5)
                except OSError as e:
                    health = e
                    break
                health = (status, json.loads(answer).get("status"))
                if status == 503:
                    break
                time.sleep(0.05)
            check(health == (503, "stopping"), "while stopping, /health answers 503 \"stopping\" (got %r)" % (health,))
            try:
                status, _, answer = srv.speech({"model": "m", "input": "Hi.", "voice": VOICE, "max_frames": 2})
                refused = status == 503 and json.loads(answer)["error"]["type"] == "server_error"
            except OSError as e:
                status, refused = e, False
            check(refused, "while stopping, a new request gets 503 (got %r)" % (status,))
            complete, rest = read_chunks(f)
            s.close()
            check(complete, "the stream in progress at SIGTERM runs to its final chunk (%d more bytes)" % len(rest))
            rc = srv.proc.wait(timeout=30)
            check(rc == 0, "the server exits 0 after the drain (%r)" % rc)
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
            MODEL = keep


def test_loadgen_in_process():
    """`qwen3tts loadgen` runs the closed loop in process: a row per lane and c with every request ok, and a
    checkpoint whose generation_config.json sets min_new_tokens = max_new_tokens makes every request exactly
    max_new_tokens - 1 frames (the end token masked throughout: how benchmarks fix the work)."""
    with tempfile.TemporaryDirectory() as scratch:
        model = fixed_frames_copy(scratch, 13)
        out_json = os.path.join(scratch, "rows.json")
        out = subprocess.run([QWEN3TTS, "loadgen", "--model", model, *HOST, "--voice", VOICE, "-c", "1,3", "--lane",
                              "off,on", "-n", "6", "--warmup", "1", "--json", out_json],
                             capture_output=True, text=True, timeout=120)
        check(out.returncode == 0, "loadgen exits 0: %s" % out.stderr)
        rows = [line for line in out.stdout.splitlines() if line.startswith("| mstar ")]
        check(len(rows) == 4, "loadgen prints a row per lane and c: %r" % out.stdout)
        data = json.load(open(out_json)) if os.path.exists(out_json) else []
        check([(r["lane"], r["c"]) for r in data] == [("off", 1), ("off", 3), ("on", 1), ("on", 3)],
              "the JSON rows name each arm: %r" % data)
        for r in data:
            check(r["ok"] == 6 and r["failed"] == 0 and r["audio_s_per_s"] > 0, "every request ok: %r" % r)
            check(r["frames"] == 6 * 12, "min_new_tokens = max_new_tokens = 13: 12 frames a request: %r" % r)
        # --trace: the worker's Chrome trace of one lane, every step on its stream's track with its rows.
        trace_path = os.path.join(scratch, "run.trace.json")
        out = subprocess.run([QWEN3TTS, "loadgen", "--model", model, *HOST, "--voice", VOICE, "-c", "2", "-n", "4",
                              "--trace", trace_path], capture_output=True, text=True, timeout=120)
        check(out.returncode == 0, "loadgen --trace exits 0: %s" % out.stderr)
        events = json.load(open(trace_path))["traceEvents"] if os.path.exists(trace_path) else []
        tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        decodes = [e for e in events if e.get("ph") == "X" and e.get("name") == "talker_decode"
                   and tracks.get(e["tid"]) == "chain stream"]
        check(len(decodes) >= 12 and all(1 <= e["args"]["rows"] <= 2 for e in decodes),
              "the trace has the decode steps on the chain stream's track, 1 or 2 rows each: %d" % len(decodes))
        out = subprocess.run([QWEN3TTS, "loadgen", "--model", model, *HOST, "--voice", VOICE, "--lane", "off,on",
                              "--trace", trace_path], capture_output=True, text=True, timeout=60)
        check(out.returncode == 1 and "--trace" in out.stderr and "one --lane" in out.stderr,
              "--trace with two lanes is refused, saying to give one: %r" % out.stderr)
        gen_path = os.path.join(model, "generation_config.json")
        gen = json.load(open(gen_path))
        gen["min_new_tokens"] = -1
        json.dump(gen, open(gen_path, "w"))
        out = subprocess.run([QWEN3TTS, "loadgen", "--model", model, *HOST, "--voice", VOICE, "-c", "1", "-n", "1"],
                             capture_output=True, text=True, timeout=60)
        check(out.returncode == 1 and "generation_config.json: min_new_tokens is -1" in out.stderr,
              "a negative min_new_tokens is refused, naming the file and field: %r" % out.stderr)


def test_full_and_voice_design():
    """A server with room for one request answers 429 to a second; a VoiceDesign checkpoint wants instructions
    and no voice."""
    global MODEL
    tiny17 = os.path.join(os.path.dirname(MODEL), "tiny17")
    srv = Server("--max-live", "1", "--max-queued", "0", "--max-frames", "400")
    try:
        s = socket.create_connection((srv.host, srv.port), timeout=60)
        body = json.dumps({"model": "m", "input": "One sentence.", "voice": VOICE, "seed": 7, "stream": True,
                           "max_frames": 400}).encode()
        s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        f = s.makefile("rb")
        check(b" 200 " in f.readline(), "the one allowed request streams")
        while f.readline() not in (b"\r\n", b""):
            pass
        f.readline()  # the first chunk's size: the request is in flight
        status, _, answer = srv.speech({"model": "m", "input": "Hi.", "voice": VOICE, "max_frames": 2})
        check(status == 429 and json.loads(answer)["error"]["type"] == "rate_limit_error",
              "a request beyond --max-live + --max-queued gets 429 (got %d)" % status)
        f.close()
        s.close()
        m = wait_idle(srv)
        check(outcome(m, "cancelled") == 1 and outcome(m, "rejected") == 1, "the hang-up cancelled, the 429 rejected")
    finally:
        srv.stop()
    keep, MODEL = MODEL, tiny17
    try:
        srv = Server("--max-frames", "8")
        status, _, answer = srv.speech({"model": "m", "input": "Hi.", "voice": VOICE})
        check(status == 400 and json.loads(answer)["error"]["param"] == "voice", "VoiceDesign refuses a voice")
        status, _, answer = srv.speech({"model": "m", "input": "Hi."})
        check(status == 400 and json.loads(answer)["error"]["param"] == "instructions",
              "VoiceDesign needs instructions")
        status, ctype, wav = srv.speech({"model": "m", "input": "Hi.", "instructions": "A calm voice."})
        check(status == 200 and ctype == "audio/wav" and wav[:4] == b"RIFF", "VoiceDesign speaks from instructions")
        _, _, body = srv.request("GET", "/health")
        check(json.loads(body).get("voices") == [], "a VoiceDesign checkpoint's /health lists no voices: %r" % body)
        srv.stop()
    finally:
        MODEL = keep


def test_language():
    """--language sets every request's language: a request's samples equal synth's with the same --language. An
    unknown one is refused at start with the checkpoint's languages."""
    out = subprocess.run([QWEN3TTS, "serve", "--model", MODEL, "--port", "0", "--language", "klingon"],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 2 and "--language \"klingon\" is not one of this checkpoint's languages: auto, "
          "beijing_dialect, chinese, english, german" in out.stderr,
          "serve refuses an unknown --language with the list: %r %r" % (out.returncode, out.stderr))
    srv = Server("--language", "English")
    try:
        _, _, body = srv.request("GET", "/health")
        check(json.loads(body).get("language") == "english", "/health names the language: %r" % body)
        text, seed, frames = "Hello there.", 3, 12
        ref = synth_wav(text, seed, frames, "--language", "english")
        check(ref != synth_wav(text, seed, frames), "english and auto make different audio on tiny06")
        status, _, wav = srv.speech({"model": "m", "input": text, "voice": VOICE, "seed": seed, "max_frames": frames})
        check(status == 200 and wav == ref, "serve --language english answers what synth --language english writes")
    finally:
        srv.stop()


def test_device():
    """--device host serves on the host whatever the machine has; --device cuda serves on CUDA where there is a GPU
    and this build has CUDA, and otherwise exits at start saying why, before it listens."""
    srv = Server()
    try:
        _, _, body = srv.request("GET", "/health")
        check(json.loads(body).get("device") == "host", "serve --device host serves on the host: %r" % body)
    finally:
        srv.stop()
    proc = subprocess.Popen([QWEN3TTS, "serve", "--model", MODEL, "--port", "0", "--device", "cuda"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.match(r"listening on http://([0-9.]+):(\d+)", line)
        if m:  # a GPU and a CUDA build
            c = http.client.HTTPConnection(m.group(1), int(m.group(2)), timeout=60)
            c.request("GET", "/health")
            health = json.loads(c.getresponse().read())
            c.close()
            check(health.get("device") == "cuda", "serve --device cuda serves on CUDA: %r" % health)
        else:
            err = proc.communicate(timeout=60)[1]
            check(proc.returncode == 1 and "device cuda" in err and "host" in err,
                  "serve --device cuda without a GPU (or a CUDA build) exits 1 naming the device and the "
                  "alternative: %r %r" % (proc.returncode, err))
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=20)


def test_usage_errors():
    """Every usage error exits 2 with a message, whatever the subcommand (not CLI11's 106 or 109)."""
    def run(*args):
        return subprocess.run([QWEN3TTS, *args], capture_output=True, text=True, timeout=60)
    for args in (["serve"], ["loadgen"], ["loadgen-http"], ["synth"], ["decode"], ["--bogus"],
                 ["serve", "--model", MODEL, "--bogus"], ["serve", "--model", MODEL, "--device", "gpu"],
                 ["loadgen-http", "--url", "http://x", "-c", "0"]):
        out = run(*args)
        check(out.returncode == 2 and out.stderr.strip(), "qwen3tts %s exits 2 with a message: %r %r" %
              (" ".join(args), out.returncode, out.stderr))
    out = run("nonsense")
    check(out.returncode == 2 and '"nonsense" is not a subcommand' in out.stderr and "loadgen-http" in out.stderr,
          "an unknown subcommand exits 2 naming the subcommands: %r %r" % (out.returncode, out.stderr))
    out = run("serve", "--model", MODEL, "--max-batch", "32", "--max-live", "8")
    check(out.returncode == 2 and "--max-batch 32 is above --max-live 8" in out.stderr,
          "serve refuses --max-batch above --max-live: %r %r" % (out.returncode, out.stderr))
    out = run("--help")
    check(out.returncode == 0 and all(re.search(r"^\s+%s\s" % c, out.stdout, re.M)
                                      for c in ("synth", "decode", "serve", "loadgen-http", "loadgen")),
          "qwen3tts --help lists every subcommand: %r" % out.stdout)
    for sub in ("synth", "decode", "serve", "loadgen", "loadgen-http"):
        out = run(sub, "--help")
        check(out.returncode == 0 and "qwen3tts %s [OPTIONS]" % sub in out.stdout,
              "qwen3tts %s --help's usage line names the command: %r" % (sub, out.stdout[:200]))


def main():
    t0 = time.time()
    srv = Server("--max-live", "16", "--max-queued", "128", "--max-frames", "400", "--max-text", "4096",
                 "--max-body", "65536")
    try:
        for test in (test_health_and_metrics, test_listen_backlog, test_equal_to_synth, test_hang_ups, test_malformed, test_body_bounds,
                     test_idle_connections, test_fuzz, test_loadgen_http, test_second_server_same_port):
            t = time.time()
            test(srv)
            print("%s: %.1f s" % (test.__name__, time.time() - t), flush=True)
    finally:
        rc = srv.stop()
    check(rc == 0, "the server stops cleanly on SIGTERM (exit %r)" % rc)
    for test in (test_full_and_voice_design, test_stop_drains, test_loadgen_in_process, test_language, test_device,
                 test_usage_errors):
        t = time.time()
        test()
        print("%s: %.1f s" % (test.__name__, time.time() - t), flush=True)
    print("%d failures, %.1f s" % (len(failures), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
