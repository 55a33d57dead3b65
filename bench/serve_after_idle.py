"""First audio of `qwen3tts serve` back to back and after 0.2 s idle: a streaming pcm request of 4 frames, 40 times
(the first 5 left out), time from sending it to the first audio byte. Shows what the worker's idle sleeps cost a
request that comes to an idle server. Usage: python3 bench/serve_after_idle.py [QWEN3TTS] [MODEL]"""
import json, socket, subprocess, sys, time, re, statistics
q = sys.argv[1] if len(sys.argv) > 1 else "build/examples/qwen3tts"
model = sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/qwen3tts/tiny06"
p = subprocess.Popen([q, "serve", "--model", model, "--port", "0"], stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, text=True)
line = p.stdout.readline()
host, port = re.search(r"http://([0-9.]+):(\d+)", line).groups()
body = json.dumps({"model": "x", "input": "Hello there.", "voice": "vivian", "stream": True,
                   "response_format": "pcm", "max_frames": 4}).encode()
def first_audio():
    s = socket.create_connection((host, int(port)))
    t0 = time.perf_counter()
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(65536)
    head, _, rest = buf.partition(b"\r\n\r\n")
    while not rest:
        rest = s.recv(65536)
    t = time.perf_counter() - t0
    while s.recv(65536):
        pass
    s.close()
    return t
for gap in (0.0, 0.2):
    ts = []
    for i in range(40):
        time.sleep(gap)
        ts.append(first_audio() * 1000)
    ts = ts[5:]
    print("gap %.1f s: first audio p50 %.2f ms, mean %.2f ms" % (gap, statistics.median(ts), statistics.mean(ts)))
p.terminate(); p.wait()
