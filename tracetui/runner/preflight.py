"""Checks before anything trains that need heavy imports or the machine (the model's config
and LoRA targets, the data set, the device), and the GPU count. Above :mod:`tracetui.core.config`
(which checks what needs no import) and the run sources, so neither imports the other."""

from __future__ import annotations

import os
import sys
from typing import Any

from ..core import clock
from ..core.config import ConfigError, SweepConfig, dataset_kind, model_kind
from ..core.nvml import NvmlUnavailable, device_count
from ..core.nvml import names as gpu_names
from ..core.presets import build_config
from ..core.text import say
from .forkrun import quiet_helper
from .lifetime import restart_server_if_gone, server_pid
from .sources import load_text_dataset


def validate_deep(cfg: SweepConfig) -> None:
    """Checks that need the model, the data or the GPU: run once before any run, in a process
    forked from the fork server where there is one (:func:`validate_deep_forked`), else here."""
    from ..probe.callback import missing_callback_events  # (imports torch and transformers)

    why = missing_callback_events()
    if why:
        raise ConfigError("transformers", why)
    kind = model_kind(cfg.model)
    model_config = None
    if kind in ("local", "hub"):
        try:
            from transformers import AutoConfig

            model_config = AutoConfig.from_pretrained(cfg.model)
        except Exception as exc:  # noqa: BLE001 - any loader failure is a user-facing config error
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError("--model", f"cannot load {cfg.model!r} ({first[:160]})",
                              "check the path or id, or use a built-in preset such as tiny") from None
    else:
        model_config = build_config(cfg.model)
    check_lora_targets(cfg, model_config)
    dkind = dataset_kind(cfg.dataset)
    if dkind != "synthetic":
        ds = load_text_dataset(cfg)  # raises ConfigError with a precise message
        if len(ds) == 0:
            raise ConfigError("--dataset", f"{cfg.dataset} has no rows", "give a data set with text in it")
    gpus = cfg.gpu_list()
    if gpus:
        count = gpu_count()
        bad = [g for g in gpus if g >= count]
        if bad:
            raise ConfigError("--gpus", f"GPU {bad[0]} does not exist (this machine has {count})",
                              "list indices below that (nvidia-smi shows them)")
    if cfg.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--device", f"{cfg.device} asked for, but this machine has no usable CUDA GPU",
                              "use --device cpu or auto")
        if ":" in cfg.device and int(cfg.device[5:]) >= torch.cuda.device_count():
            raise ConfigError("--device", f"{cfg.device} does not exist (this machine has {torch.cuda.device_count()} GPU(s))",
                              "pick an index below that")
    if cfg.precision == "fp16" and cfg.device == "auto":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("--precision", "fp16 training needs a GPU and none is available",
                              "use fp32 or bf16 on CPU")


#: seconds the forked checks may take before tracetui says it is still checking
SLOW_CHECK_S = 30.0
def offline_if_hub_unreachable(cfg: SweepConfig, timeout_s: float = 3.0) -> str:
    """A model or data set named by hub id, on a machine that cannot reach the hub: every load
    (the checks, then each run) would spend about half a minute on the hub's own retries before
    it falls back to this machine's cache. Asked once, before the fork server starts (its
    processes inherit the answer): if the hub's host can be reached by no route within
    ``timeout_s`` (directly, nor through the proxy the environment names for it, which must
    take the connection and, for HTTPS, open a tunnel to the hub), loads go straight to the
    cache (``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1``). Both routes are tried, side by
    side: which one the hub's client takes (``NO_PROXY``'s forms differ between clients) is not
    judged here, so a route that works is never taken away. Left alone where the user set
    either variable. Returns the line that says so ("" when nothing changed)."""
    from urllib.parse import urlsplit

    named = [flag for flag, kind in (("--model", model_kind(cfg.model)), ("--dataset", dataset_kind(cfg.dataset)))
             if kind == "hub"]
    if not named or any(os.environ.get(v) is not None for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return ""
    url = urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    # (an HF_ENDPOINT without a scheme, "hub.local", is all path to urlsplit: named as given)
    host = url.hostname or url.path.split("/")[0] or "huggingface.co"
    https = url.scheme != "http"
    port = _port(url) or (443 if https else 80)
    proxy = _proxy_for("https" if https else "http")
    whys = _reach(host, port, https, proxy, timeout_s)
    if any(why == "" for why in whys):
        return ""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    what = " and ".join(getattr(cfg, flag[2:]) for flag in named)
    routes = (f"directly ({whys[0]}) or through the proxy {_shown(proxy)} ({whys[1]})" if proxy
              else f"({whys[0]})")
    return (f"{host} cannot be reached {routes}: {what} load from this machine's cache only (HF_HUB_OFFLINE=1); "
            f"set HF_HUB_OFFLINE=0 to wait for the hub instead")


def _port(url) -> int | None:
    try:
        return url.port
    except ValueError:  # out of range or not a number
        return None


def _proxy_for(scheme: str) -> str | None:
    """The proxy the environment names for ``scheme`` (``HTTPS_PROXY``, ``ALL_PROXY``, ...; as
    curl and the hub's clients read them, with ``http://`` where no scheme is given), or None;
    one whose address cannot be read is left to the hub's client to refuse."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies

    proxies = getproxies()
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy:
        return None
    proxy = proxy if "://" in proxy else f"http://{proxy}"
    u = urlsplit(proxy)
    try:
        u.port
    except ValueError:
        return None
    return proxy if u.hostname else None


def _hostport(host: str, port: int | None = None) -> str:
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


def _shown(proxy: str) -> str:
    """A proxy's address without the credentials it may carry."""
    from urllib.parse import urlsplit

    u = urlsplit(proxy)
    return f"{u.scheme}://{_hostport(u.hostname or '', u.port)}"


def _reach(host: str, port: int, https: bool, proxy: str | None, timeout_s: float) -> list[str]:
    """Why ``host:port`` cannot be reached directly, then (where a proxy is named) through it:
    "" for a route that works. All within ``timeout_s`` however a name lookup hangs."""
    import socket
    import threading
    import time

    deadline = time.monotonic() + timeout_s
    whys = ["no answer in %.0f s" % timeout_s] * (2 if proxy else 1)

    def attempt(i: int) -> None:
        try:
            if i == 0:
                socket.create_connection((host, port), timeout=timeout_s).close()
                whys[0] = ""
            else:
                whys[1] = _through_proxy(proxy, host, port, https, deadline)
        except OSError as exc:
            whys[i] = (exc.strerror or str(exc) or type(exc).__name__).strip()
        except ValueError as exc:  # an address that cannot be used
            whys[i] = str(exc)

    threads = [threading.Thread(target=attempt, args=(i,), name="tracetui-hub-check", daemon=True)
               for i in range(len(whys))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline + 0.5 - time.monotonic()))
    return list(whys)


def _through_proxy(proxy: str, host: str, port: int, https: bool, deadline: float) -> str:
    """Through an HTTP proxy, for HTTPS: the proxy takes the connection and answers a
    ``CONNECT`` to the host with 200. Plain HTTP through it, and other proxies (SOCKS, HTTPS):
    it takes the connection."""
    import base64
    import socket
    import time
    from urllib.parse import unquote, urlsplit

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("timed out")
        return remaining

    u = urlsplit(proxy)
    default = {"http": 80, "https": 443}.get(u.scheme, 1080)
    with socket.create_connection((u.hostname or "", u.port or default), timeout=left()) as s:
        if u.scheme != "http" or not https:  # only a plain HTTP proxy's tunnel can be asked here
            return ""
        auth = ""
        if u.username is not None:
            token = base64.b64encode(f"{unquote(u.username)}:{unquote(u.password or '')}".encode()).decode()
            auth = f"Proxy-Authorization: Basic {token}\r\n"
        target = _hostport(host, port)
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n".encode())
        answer = b""
        while b"\n" not in answer and len(answer) < 4096:
            s.settimeout(left())
            chunk = s.recv(1024)
            if not chunk:
                break
            answer += chunk
    line = answer.split(b"\n", 1)[0].decode("latin-1").strip()
    parts = line.split(None, 2)
    if len(parts) >= 2 and parts[0].startswith("HTTP/") and parts[1] == "200":
        return ""
    return f"the proxy answered {line!r}" if line else "the proxy closed the connection"


def validate_deep_forked(cfg: SweepConfig, ctx) -> None:
    """:func:`validate_deep` in a process forked from the fork server (``ctx``), which imported
    torch, transformers, TRL and PEFT already: on this path tracetui's own process never imports
    them. It is at its first trial sooner where cores are few (the two would import side by
    side) and holds less. The check process starts as a trial does (it dies with tracetui, and
    asks the CUDA driver, not NVML, whether a GPU is usable). A Ctrl-C stops it at once. If it
    ends without an answer (the server or the check killed, crashed, or an error that is not a
    configuration error), the checks run again here, where a traceback shows."""
    import time
    from multiprocessing.connection import wait

    answer = None
    proc = None
    reader, writer = ctx.Pipe(duplex=False)
    try:
        restart_server_if_gone()
        proc = ctx.Process(target=_checks_child, args=(cfg, writer, server_pid()), daemon=True,
                           name="tracetui-checks")
        proc.start()
        writer.close()
        ready = wait([reader, proc.sentinel], SLOW_CHECK_S)
        if not ready:  # a hub that takes the connection and never answers: say so, not silence
            say(f"tracetui: still checking {cfg.model} and {cfg.dataset} after {SLOW_CHECK_S:.0f} s "
                "(a hub that does not answer?); Ctrl-C stops")
            ready = wait([reader, proc.sentinel])
        if reader in ready:
            answer, times = reader.recv()
            clock.marks.update(server_marks(times, clock.marks.get("command", 0.0)))
    except (EOFError, OSError):
        answer = None  # the fork server or the check died: the checks run here instead
    except BaseException:
        if proc is not None and proc.pid is not None:
            proc.kill()  # interrupted: not held up by a check that may take minutes (a hub id)
        raise
    finally:
        reader.close()
        writer.close()
        if proc is not None and proc.pid is not None:
            proc.join()
    if isinstance(answer, ConfigError):
        raise answer
    if answer != "ok":
        validate_deep(cfg)
    clock.marks["checked"] = time.time()  # (the checks run here again included)


def _checks_child(cfg: SweepConfig, writer, server: int | None) -> None:
    # as a trial: dies with tracetui, and the driver's own CUDA check. The answer goes through the
    # pipe; what the libraries print while they load (the data set loader's progress bar, a hub's
    # warnings) goes nowhere. A check that fails otherwise than as a configuration error runs
    # again in tracetui, where its traceback shows.
    quiet_helper(server)
    try:
        validate_deep(cfg)
        answer: Any = "ok"
    except ConfigError as exc:
        answer = exc
    except Exception:  # noqa: BLE001 - the parent runs the checks again and shows this one
        answer = "error"
    try:
        writer.send((answer, server_times()))
        writer.close()
    except OSError:
        pass  # tracetui has gone (interrupted while the server was still importing)


def server_marks(times: dict[str, float], since: float) -> dict[str, float]:
    """The fork server's imports as this command's time account counts them (``since``: the
    command's start): a server started before the command (by an earlier command of the same
    process) imported for that one: none of it, or only what was left of its imports, is this
    command's."""
    server, ready = times.get("server"), times.get("libraries")
    if ready is None or ready < since:
        return {}
    return {"server": max(server if server is not None else since, since), "libraries": ready}


def server_times() -> dict[str, float]:
    """In a process forked from the fork server: when the server began and ended its imports
    (:data:`tracetui.runner.startup.gcoff.STARTED`, :data:`tracetui.runner.startup.gcfreeze.READY`)."""
    times = {}
    for key, module, name in (("server", "tracetui.runner.startup.gcoff", "STARTED"),
                              ("libraries", "tracetui.runner.startup.gcfreeze", "READY")):
        value = getattr(sys.modules.get(module), name, None)
        if isinstance(value, float):
            times[key] = value
    return times


def check_lora_targets(cfg: SweepConfig, model_config: Any) -> None:
    """``--lora-targets`` that name no module of the model would fail in every run, minutes in:
    check them on the model's skeleton (built on the meta device: no memory, no weights)."""
    if cfg.lora_targets.strip() == "all-linear":
        return
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(model_config)
    except Exception as exc:  # noqa: BLE001 - said on stderr: the targets are then left to the run to judge
        say(f"tracetui: --lora-targets not checked before the runs: the model's skeleton could not be built "
            f"({type(exc).__name__}: {str(exc)[:200]}); a target that names no layer fails in each run")
        return
    names = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    tails = sorted({n.rsplit(".", 1)[-1] for n in names})
    for target in (t.strip() for t in cfg.lora_targets.split(",") if t.strip()):
        if not any(n == target or n.endswith("." + target) for n in names):
            raise ConfigError("--lora-targets", f"{target!r} names no linear layer of {cfg.model}",
                              f"use all-linear or some of {', '.join(tails[:12])}")


#: device files without one of which no GPU runtime torch uses runs: CUDA (nvidiactl), Jetson's
#: integrated GPU (nvhost-ctrl, nvmap: no NVML there), ROCm (kfd), WSL's GPU (dxg)
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvhost-ctrl", "/dev/nvmap", "/dev/kfd", "/dev/dxg")


def gpu_count() -> int:
    """GPUs on this machine, without initialising CUDA in this process (NVML, else torch)."""
    try:
        return device_count()
    except NvmlUnavailable:  # no NVML, or no driver it can reach: ask torch
        pass
    if sys.platform.startswith("linux") and not any(os.path.exists(d) for d in GPU_DEVICE_FILES):
        return 0  # no device a GPU runtime could open: no need to import torch to know it
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def device_kind(cfg: SweepConfig, cuda_available=None) -> str:
    """``cpu`` or ``cuda``: where ``cfg``'s runs train. ``auto`` asks ``cuda_available`` (a
    trial's ``torch.cuda.is_available``) or, where CUDA must not start, :func:`gpu_count`.
    The one place ``--device`` is resolved."""
    if cfg.device == "cpu":
        return "cpu"
    if cfg.device.startswith("cuda"):
        return "cuda"
    available = cuda_available() if cuda_available is not None else gpu_count() > 0
    return "cuda" if available else "cpu"


def gpu_model_warnings(lanes: list[int | None]) -> list[str]:
    """Runs on GPUs of different models cannot be compared: say so before they start."""
    gpus = [g for g in lanes if g is not None]
    if len(gpus) < 2:
        return []
    try:
        names = gpu_names(gpus)
    except NvmlUnavailable as exc:
        return [f"the GPUs' models cannot be compared: {exc}"]
    if len(set(names.values())) > 1:
        listed = ", ".join(f"GPU {g}: {n}" for g, n in names.items())
        return [f"the GPUs are not the same model ({listed}): their times cannot be compared with each other"]
    return []
