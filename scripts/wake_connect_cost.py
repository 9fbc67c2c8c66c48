# What a wake-stream connect (`GET /v1/wakes?session=W`) costs while other sessions have
# pending notices (decision D41): time from connect to the catch-up wake, 51 connects each.
# usage: python3 scripts/wake_connect_cost.py path/to/aware OTHERS...   (e.g. 0 200 1000 3000)
import http.client, json, os, socket, statistics, subprocess, sys, tempfile, time, urllib.parse
bin_, counts = sys.argv[1], [int(a) for a in sys.argv[2:]]
def serve():
    d = tempfile.mkdtemp(prefix="net-measure-")
    open(os.path.join(d, "config.toml"), "w").write(
        "notify_on_create = false\n[retention]\nprune_interval_secs = 31536000\n[monitor]\nenabled = false\n")
    pf = os.path.join(d, "port")
    p = subprocess.Popen([bin_, "serve", "--data-dir", d, "--bind", "127.0.0.1:0", "--port-file", pf,
                          "--durability", "normal"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(pf) or not open(pf).read().strip():
        time.sleep(0.05)
    port = int(open(pf).read().strip())
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port); c.request("GET", "/health")
            if json.loads(c.getresponse().read()).get("status") == "ok": break
        except Exception: pass
        time.sleep(0.05)
    return p, port
def call(c, m, path, body=None):
    h = {"Content-Type": "application/json"} if body is not None else {}
    c.request(m, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); r.read(); return r.status
def seg(k): return urllib.parse.quote(k, safe="")
W, T = "agent:main:main", "agent:main:target"
print("others\tconnect median ms\tp90 ms")
for n in counts:
    p, port = serve()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port)
        for k in [W, T]: call(c, "POST", "/v1/sessions", {"key": k})
        call(c, "POST", f"/v1/sessions/{seg(W)}/watches", {"target": T})
        for i in range(n):
            k = f"agent:main:other-{i}"
            call(c, "POST", "/v1/sessions", {"key": k})
            call(c, "POST", f"/v1/sessions/{seg(k)}/watches", {"target": T})
        assert call(c, "POST", f"/v1/sessions/{seg(T)}/turns", {"role": "user", "text": "hi", "channel": "slack"}) == 201
        times = []
        for _ in range(51):
            t0 = time.perf_counter()
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(f"GET /v1/wakes?session={seg(W)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            buf = b""
            while b"event: wake" not in buf:
                chunk = s.recv(65536)
                if not chunk: raise SystemExit("stream ended")
                buf += chunk
            times.append((time.perf_counter() - t0) * 1000)
            s.close()
        times.sort()
        print(f"{n}\t{statistics.median(times):.2f}\t{times[int(len(times)*0.9)]:.2f}", flush=True)
    finally:
        p.terminate(); p.wait()
