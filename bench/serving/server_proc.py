"""The server side of a benchmark run, seen from outside: start a server and
time its cold start (spawn -> /health 200), sample its RSS and GPU memory while
load runs, and describe the machine and commit. Used by serve_bench.py; no
third-party imports."""

import os
import pathlib
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"listening on (http://[0-9A-Za-z.\-\[\]:]+:\d+)")


# ----------------------------------------------------------------------------- server resources

def read_proc_status(pid):
    """{'VmRSS': MiB, 'VmHWM': MiB} of pid, or {} when unreadable."""
    out = {}
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024.0
    except (OSError, ValueError):
        pass
    return out


def process_tree(pid):
    """pid and its descendants (a python server's compile workers, a wrapper shell)."""
    children = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def gpu_memory_by_pid():
    """{pid: MiB} from nvidia-smi, or None when there is no nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    usage = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            try:
                usage[int(parts[0])] = usage.get(int(parts[0]), 0.0) + float(parts[1])
            except ValueError:
                pass
    return usage


def gpu_used_total():
    """MiB in use on all GPUs, or None."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return sum(float(x) for x in out.split())
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def server_gpu_mib(pid, idle_total):
    """The server's GPU memory: its processes' usage per nvidia-smi; where a
    container hides the pids, all GPUs' usage minus what was used before launch."""
    usage = gpu_memory_by_pid()
    if usage is None:
        return None
    tree = set(process_tree(pid))
    mine = sum(v for p, v in usage.items() if p in tree)
    if mine == 0 and idle_total is not None:
        total = gpu_used_total()
        if total is not None:
            return max(0.0, total - idle_total)
    return mine


class ResourceSampler:
    """Samples the server's RSS (every 0.2 s) and GPU memory (every
    gpu_interval s, first after one interval, and once more at the end; 0:
    at the end only) on a thread while a scenario runs; peaks are what gets
    reported. Each GPU sample runs nvidia-smi, which can stall the server's
    threads for tens of milliseconds, so none is taken as a scenario starts."""

    def __init__(self, pid, idle_gpu_total=None, gpu_interval=1.0):
        self.pid, self.idle_gpu_total, self.gpu_interval = pid, idle_gpu_total, gpu_interval
        self.stop_event = threading.Event()
        self.peak_rss = self.peak_gpu = None
        self.thread = None

    def sample_once(self):
        rss = sum(read_proc_status(p).get("VmRSS", 0.0) for p in process_tree(self.pid))
        if rss:
            self.peak_rss = max(self.peak_rss or 0.0, rss)

    def gpu_once(self):
        mib = server_gpu_mib(self.pid, self.idle_gpu_total)
        if mib is not None:
            self.peak_gpu = max(self.peak_gpu or 0.0, mib)

    def _run(self):
        last_gpu = time.monotonic()
        while not self.stop_event.is_set():
            self.sample_once()
            if self.gpu_interval > 0 and time.monotonic() - last_gpu >= self.gpu_interval:
                self.gpu_once()
                last_gpu = time.monotonic()
            self.stop_event.wait(0.2)

    def __enter__(self):
        if self.pid:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.thread:
            self.stop_event.set()
            self.thread.join()
            self.sample_once()
            self.gpu_once()

    def report(self):
        out = {"peak_rss_mib": round(self.peak_rss, 1) if self.peak_rss else None,
               "peak_gpu_mib": round(self.peak_gpu, 1) if self.peak_gpu is not None else None}
        if self.pid:
            hwm = read_proc_status(self.pid).get("VmHWM")
            out["rss_hwm_mib"] = round(hwm, 1) if hwm else None
        return out


# ----------------------------------------------------------------------------- server launch

def http_get(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except (OSError, ValueError):
        return 0, b""


class LaunchedServer:
    """A server started here: stdout+stderr to a log file, its URL read from the
    "listening on http://HOST:PORT" line, ready when /health answers 200. The
    time from spawn to that answer is the cold start."""

    def __init__(self, command, log_path, timeout):
        self.command, self.log_path = command, log_path
        self.log = open(log_path, "wb")
        self.idle_gpu_total = gpu_used_total()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(shlex.split(command), stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid
        deadline = t0 + timeout
        self.url = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; log: {log_path}\n{self.tail()}")
            if time.perf_counter() > deadline:
                self.stop()
                raise RuntimeError(f"server not ready in {timeout} s; log: {log_path}\n{self.tail()}")
            if self.url is None:
                m = LISTENING.search(pathlib.Path(log_path).read_text(errors="replace"))
                if m:
                    self.url = m.group(1).replace("0.0.0.0", "127.0.0.1")
            if self.url and http_get(self.url + "/health", timeout=1.0)[0] == 200:
                break
            time.sleep(0.005)
        self.ready_s = time.perf_counter() - t0
        self.gpu_at_ready = server_gpu_mib(self.pid, self.idle_gpu_total)

    def tail(self, n=30):
        return "\n".join(pathlib.Path(self.log_path).read_text(errors="replace").splitlines()[-n:])

    def stop(self):
        """SIGTERM, then SIGKILL after 20 s; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


# ----------------------------------------------------------------------------- provenance

def commit_id(explicit):
    if explicit:
        return explicit
    if os.environ.get("TERN_COMMIT"):
        return os.environ["TERN_COMMIT"]
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if rev.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return rev.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def machine_info():
    info = {"host": platform.node(), "os": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gib"] = round(int(line.split()[1]) / 2**20, 1)
                break
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout
            info["gpus"] = [line.strip() for line in out.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError):
            pass
    return info


def machine_line(m):
    gpu = f", {len(m['gpus'])}x {m['gpus'][0].split(',')[0]}" if m.get("gpus") else ""
    return f"{m.get('cpu', '?')} ({m.get('cpus')} CPUs, {m.get('mem_gib', '?')} GiB){gpu}"
