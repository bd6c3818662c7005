"""The tiny CPU recipe on a Ray cluster of two nodes, started with ``ray start`` as a user starts one.

docs/recipes.md's multi-node launch, on one machine: ``ray start --head`` and ``ray start
--address=<head>`` (each ``--block``, with resources of its own: one logical GPU a node), then
``NNODES=2 N_GPUS_PER_NODE=1 bash recipes/tiny_cpu/run.sh`` with ``RAY_ADDRESS=<head>``. veRL's
resource pool asks one placement group of one GPU bundle per node (``STRICT_PACK``,
``verl/single_controller/ray/base.py:131-162``), so its two trainer ranks, and the ``hf`` replica
each rank serves, run on different nodes. The run uses the GPU recipes' engine settings that the
CPU group turns off (``coba_verl/config/coba_cpu/cpu.yaml``): ``rollout.free_cache_engine=true``
(the replicas sleep after every generation and wake for the weights) and veRL's own number of
TransferQueue storage units, in ``colocate_async`` mode (the ``hf`` server's partial rollout).

Two launches of about 2-3 minutes each on 2 cores, on one cluster: coba with pass-rate priors for
2 steps (budgets differ from step 1) with a checkpoint at step 2, then a resume from it to step 3
(the first of epoch 2), as a second Ray job. CI runs the first launch (about 4.5 minutes with the
cluster's start and the tiny data); the resume and every check of it are ``e2e_extended``. The last
test stops the cluster and checks that every process it started is gone. Never ``ray stop``: it
stops every Ray of the machine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch
import verl
import yaml

from tests.cpu_backend import test_verl_e2e as e2e
from tests.cpu_backend.test_verl_e2e import M, N, step_metrics, trained_groups

#: The end-to-end tests' tiny data and model (their fixture: prepared once a test session).
tiny = e2e.tiny

pytestmark = pytest.mark.e2e
logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
#: Logical CPUs of each node: what one trainer slot reserves on its node (veRL's bundle asks 3,
#: ``base.py:146``), the hf server, an agent-loop and a reward worker, the TaskRunner and
#: TransferQueue's controller and storage units (1 each, ``transfer_queue/storage/simple_storage.py:722``),
#: wherever Ray puts them.
NODE_CPUS = 16
#: veRL's default number of TransferQueue storage units (the GPU recipes'); the CPU group sets 1.
VERL_TQ_CONFIG = Path(verl.__file__).parent / "trainer/config/transfer_queue/transfer_queue.yaml"
GPU_STORAGE_UNITS = yaml.safe_load(VERL_TQ_CONFIG.read_text())["backend"]["SimpleStorage"][
    "num_data_storage_units"
]
#: What the GPU recipes run with and the CPU group (coba_cpu/cpu.yaml) turns off.
GPU_ENGINE = (
    "actor_rollout_ref.rollout.free_cache_engine=true",
    f"transfer_queue.backend.SimpleStorage.num_data_storage_units={GPU_STORAGE_UNITS}",
)
COLOCATE_ASYNC = ("trainer.v1.trainer_mode=colocate_async", "trainer.v1.colocate_async.num_warmup_batches=1")
#: The tiny recipe's budget bounds (coba.min_rollouts, coba.max_rollouts).
RECIPE = yaml.safe_load((REPO / "recipes/tiny_cpu/config/_tiny.yaml").read_text())
MIN_ROLLOUTS, MAX_ROLLOUTS = RECIPE["coba"]["min_rollouts"], RECIPE["coba"]["max_rollouts"]
#: Step of the checkpoint the second launch resumes from; the first launch ends there.
SAVED_STEP = 2


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports free on this machine now (bound together, so distinct)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def ray_env() -> dict[str, str]:
    """The environment of this cluster's processes: this test's, without the suite's
    ``RAY_ADDRESS=local`` (tests/conftest.py), and no idle workers prestarted."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # Ray's token authentication off for this cluster, whatever ~/.ray/auth_token holds (Ray 2.60 turns
    # it on where that file exists: ray/_private/authentication/authentication_token_setup.py:92-106).
    quiet = {"RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0"}
    return {**env, "RAY_AUTH_MODE": "disabled", **quiet}


#: Ray's state API, run with the cluster's environment: its alive node ids and every actor's class,
#: node and job, as one JSON line.
STATE_QUERY = """
import json, sys
from ray.util.state import list_actors, list_nodes
nodes = list_nodes(address=sys.argv[1], filters=[("state", "=", "ALIVE")], raise_on_missing_output=False)
actors = list_actors(address=sys.argv[1], limit=10000, detail=True, raise_on_missing_output=False)
print(json.dumps({"nodes": [n.node_id for n in nodes], "actors": [
    {"class_name": a.class_name, "node_id": a.node_id, "job_id": a.job_id, "state": a.state} for a in actors
]}))
"""


class Cluster:
    """A head and a second node, each a ``ray start --block`` process of this test (in a session of
    its own): SIGTERM makes it stop its node's processes (``ray/_private/node.py:629-672``)."""

    def __init__(self, temp_dir: Path) -> None:
        self.temp_dir = temp_dir
        self.ray = str(Path(sys.executable).parent / "ray")
        self.nodes: list[subprocess.Popen] = []
        self.seen: dict[int, psutil.Process] = {}
        port, dashboard, *self._ports = free_ports(3 + 2 * 6)
        try:
            self._start(
                "--head", f"--port={port}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
                f"--dashboard-port={dashboard}", f"--ray-client-server-port={self._ports.pop()}",
            )  # fmt: skip
            self._wait(lambda: (temp_dir / "ray_current_cluster").exists(), "the head")
            self.address = (temp_dir / "ray_current_cluster").read_text().strip()  # the GCS's <ip>:<port>
            self._start(f"--address={self.address}")
            self._wait(lambda: len(self.node_ids()) == 2, "the second node")
        except BaseException:  # a node that did not start: stop what did
            self.stop()
            raise

    def _start(self, *args: str) -> None:
        agent, grpc, metrics, runtime_env, manager, objects = (self._ports.pop() for _ in range(6))
        command = [
            self.ray, "start", *args, "--node-ip-address=127.0.0.1", f"--temp-dir={self.temp_dir}",
            f"--num-cpus={NODE_CPUS}", "--num-gpus=1", "--object-store-memory=300000000",
            f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={grpc}",
            f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
            f"--node-manager-port={manager}", f"--object-manager-port={objects}",
            "--disable-usage-stats", "--block",
        ]  # fmt: skip
        log = (self.temp_dir / f"ray-start-{len(self.nodes)}.log").open("w")
        self.nodes.append(
            subprocess.Popen(
                command,
                env=ray_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.temp_dir,  # the workers' working folder: relative paths they write land here
            )
        )

    def _wait(self, ready, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if any(node.poll() is not None for node in self.nodes) or time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-2000:] for p in sorted(self.temp_dir.glob("ray-start-*.log")))
                raise AssertionError(f"{what} did not start:\n{logs}")
            time.sleep(1)
        self.remember()

    def remember(self) -> None:
        """Note every process the ``ray start`` processes have started so far (Ray's daemons, and
        the workers the raylets fork), for `stop`'s check."""
        for node in self.nodes:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(node.pid)
                self.seen.update({p.pid: p for p in [root, *root.children(recursive=True)]})

    def state(self) -> dict[str, list[dict]]:
        """The cluster's alive nodes and every actor it has run, dead or alive, from Ray's state API
        (asked from a process with the cluster's environment, so that this one stays off Ray)."""
        done = subprocess.run(
            [sys.executable, "-c", STATE_QUERY, self.address], env=ray_env(), capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            return {"nodes": [], "actors": [], "error": done.stderr[-2000:]}
        return json.loads(done.stdout.splitlines()[-1])

    def node_ids(self) -> list[str]:
        return self.state()["nodes"]

    def stop(self, timeout: float = 60) -> list[str]:
        """SIGTERM each node's ``ray start`` (the second node first), then wait for every process
        the cluster ever showed; SIGKILL what remains of them and return its ``pid name`` list."""
        self.remember()
        for node in reversed(self.nodes):
            with contextlib.suppress(ProcessLookupError):
                node.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(timeout)
        _, alive = psutil.wait_procs(list(self.seen.values()), timeout=timeout)
        left = []
        for process in alive:
            with contextlib.suppress(psutil.Error):
                left.append(f"{process.pid} {process.name()}")
                process.kill()
        for node in self.nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            node.wait()
        return left


@pytest.fixture(scope="module")
def cluster():
    # A short folder in /tmp: Ray's socket paths under it must fit a Unix socket name (107 bytes).
    temp_dir = Path(tempfile.mkdtemp(prefix="coba-ray-"))
    ray_cluster = Cluster(temp_dir)
    yield ray_cluster
    ray_cluster.stop()
    shutil.rmtree(temp_dir, ignore_errors=True)


def launch(tiny: Path, cluster: Cluster, out: Path, *overrides: str) -> list[dict]:
    """``NNODES=2 N_GPUS_PER_NODE=1 bash recipes/tiny_cpu/run.sh`` joined to ``cluster``, as
    docs/recipes.md says, writing under ``out``; returns veRL's step metrics.

    The variables veRL's file logger and the ``hf`` servers' request log read travel in Ray's job
    environment (``ray_kwargs.ray_init.runtime_env.env_vars``): the workers of a cluster started
    beforehand inherit the environment of ``ray start``, not the launcher's."""
    logs = out / "requests"
    logs.mkdir(parents=True)
    env = {
        **ray_env(), "RAY_ADDRESS": cluster.address, "PYTHON": sys.executable, "NNODES": "2",
        "N_GPUS_PER_NODE": "1", "TRAIN_FILES": str(tiny / "train.parquet"),
        "VAL_FILES": str(tiny / "test.parquet"), "MODEL_PATH": str(tiny / "model"),
    }  # fmt: skip
    job_env = {"VERL_FILE_LOGGER_PATH": out / "metrics.jsonl", "COBA_HF_REQUEST_LOG": logs}
    command = [
        "bash", str(REPO / "recipes/tiny_cpu/run.sh"),
        f"trainer.default_local_dir={out.parent / 'ckpt'}", "trainer.logger=[console,file]",
        "trainer.val_before_train=false", "trainer.test_freq=-1",
        f"trainer.rollout_data_dir={out / 'rollouts'}", "coba_cpu.allow_with_cuda=true",
        *COLOCATE_ASYNC, *GPU_ENGINE, *overrides,
        *(f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}={value}" for key, value in job_env.items()),
    ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=out)
    cluster.remember()
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-6000:])
    assert f"Connecting to existing Ray cluster at address: {cluster.address}" in done.stderr + done.stdout
    return step_metrics(out)


def write_priors(tiny: Path, path: Path) -> Path:
    """Pass-rate priors spread over (0, 1): prompt k of the file gets (k mod 5 + 0.5) / 5."""
    import pyarrow.parquet as pq

    indices = [row["index"] for row in pq.read_table(tiny / "train.parquet").column("extra_info").to_pylist()]
    lines = [json.dumps({"index": i, "pass_rate": (k % 5 + 0.5) / 5}) for k, i in enumerate(indices)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def priors(tiny, tmp_path_factory) -> Path:
    return write_priors(tiny, tmp_path_factory.mktemp("multinode") / "priors.jsonl")


def launched(
    cluster: Cluster, before: set[str], out: Path, steps: list[dict], numbers: list[int], seconds: float
) -> SimpleNamespace:
    """A launch's results (``numbers``: the steps it runs), with the actors of its own Ray jobs
    (those not in ``before``) and the cluster's alive nodes, from Ray's state API right after it;
    ``ckpt`` is the checkpoint folder `launch` gives it."""
    state = cluster.state()
    jobs = {a["job_id"] for a in state["actors"]} - before
    actors = [a for a in state["actors"] if a["job_id"] in jobs]
    return SimpleNamespace(
        out=out, ckpt=out.parent / "ckpt", steps=steps, numbers=numbers, seconds=seconds,
        nodes=state["nodes"], actors=actors,
    )  # fmt: skip


@pytest.fixture(scope="module")
def first(tiny, cluster, priors) -> SimpleNamespace:
    """The first launch: 2 steps of coba with the priors, a checkpoint at step 2."""
    out, started = priors.parent / "first", time.monotonic()
    steps = launch(
        tiny, cluster, out, f"trainer.total_training_steps={SAVED_STEP}", f"trainer.save_freq={SAVED_STEP}",
        f"coba.prior_file={priors}",
    )  # fmt: skip
    return launched(cluster, set(), out, steps, list(range(1, SAVED_STEP + 1)), time.monotonic() - started)


@pytest.fixture(scope="module")
def resumed(tiny, cluster, priors, first) -> SimpleNamespace:
    """The second launch, on the same cluster: the resume from step 2's checkpoint to step 3."""
    out, started = priors.parent / "resumed", time.monotonic()
    saved = first.ckpt / f"global_step_{SAVED_STEP}"
    steps = launch(
        tiny, cluster, out, f"trainer.total_training_steps={SAVED_STEP + 1}", "trainer.save_freq=-1",
        "trainer.resume_mode=resume_path", f"trainer.resume_from_path={saved}", f"coba.prior_file={priors}",
    )  # fmt: skip
    jobs_before = {a["job_id"] for a in first.actors}
    return launched(cluster, jobs_before, out, steps, [SAVED_STEP + 1], time.monotonic() - started)


#: Each test of a launch runs on both; CI runs the first (the resume is pinned in CI by the V1 kill
#: test and the colocate_async fit() resume, tests/verl_plugin/test_verl_trainer_loop.py).
LAUNCHES = ["first", pytest.param("resumed", marks=pytest.mark.e2e_extended)]


@pytest.fixture
def run(request) -> SimpleNamespace:
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("run", LAUNCHES, indirect=True)
def test_both_nodes_run_a_trainer_rank_and_an_hf_replica_of_the_launch(run):
    nodes = set(run.nodes)
    assert len(nodes) == 2, run.nodes
    # veRL's trainer ranks run in its fused worker class (create_colocated_worker_cls.<locals>.WorkerDict)
    for class_name in ("WorkerDict", "HFServer"):
        placed = [a["node_id"] for a in run.actors if a["class_name"].rsplit(".", 1)[-1] == class_name]
        assert sorted(placed) == sorted(nodes), (class_name, placed)  # one on each node


@pytest.mark.parametrize("run", LAUNCHES, indirect=True)
def test_transfer_queue_runs_veRLs_number_of_storage_units(run):
    units = sum(a["class_name"] == "SimpleStorageUnit" for a in run.actors)
    assert GPU_STORAGE_UNITS > 1 and units == GPU_STORAGE_UNITS, units


@pytest.mark.parametrize("run", LAUNCHES, indirect=True)
def test_every_step_trains_m_times_n_rollouts_with_budgets_that_differ(run):
    out, steps = run.out, run.steps
    assert [s["step"] for s in steps] == run.numbers
    for s in steps:
        assert sum(map(len, trained_groups(out, s["step"]).values())) == M * N  # veRL's dump
        assert s["coba/trained_rollouts"] == M * N
        fates = ("trained", "cut", "evicted")
        assert s["coba/rollouts"] == sum(s[f"coba/{fate}_rollouts"] for fate in fates)
        # budgets from the priors from step 1 on: the allocation's and the trained groups' sizes
        # (an update trains whole groups of the rounds generation has finished, not one round)
        group_sizes = [len(rows) for rows in trained_groups(out, s["step"]).values()]
        assert s["coba/budget_std"] > 0 and len(set(group_sizes)) > 1
        assert MIN_ROLLOUTS <= min(group_sizes) and max(group_sizes) <= MAX_ROLLOUTS


@pytest.mark.parametrize("run", LAUNCHES, indirect=True)
def test_the_replicas_sleep_after_generation_and_no_request_reaches_a_sleeping_one(run):
    logs = sorted((run.out / "requests").glob("requests-*.jsonl"))
    assert len(logs) == 2  # one replica on each node
    for log in logs:
        asleep: set = set()
        events = Counter()
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("event") in ("sleep", "wake_up"):
                asleep = set(entry["asleep"])
            if "event" in entry:
                events[entry["event"]] += 1
            else:
                assert not asleep, (log, entry["request_id"])
        assert events["sleep"] >= 1 and events["wake_up"] >= 1, (log, events)


def test_the_checkpoint_holds_the_allocator(first):
    from coba_verl.verl_plugin.hooks.dataloader import STATE_KEY

    data = torch.load(first.ckpt / f"global_step_{SAVED_STEP}" / "data.pt", weights_only=False)
    assert data[STATE_KEY]["allocator"]["tracker"]["steps"] == SAVED_STEP


@pytest.mark.e2e_extended
def test_the_resume_restores_the_allocator_and_every_session_in_flight_at_the_checkpoint(first, resumed):
    restored = first.steps[-1]["coba/in_flight_rollouts"]  # in flight when step 2 saved
    fates = ("trained", "cut", "evicted", "failed")
    settled = sum(s[f"coba/{fate}_rollouts"] for s in resumed.steps for fate in fates)
    generated = sum(s["coba/rollouts_generated"] for s in resumed.steps)
    assert restored + generated == settled + resumed.steps[-1]["coba/in_flight_rollouts"]
    assert resumed.steps[0]["coba/budget_std"] > 0  # step 3 allocates from the restored tracker


def test_stopping_the_cluster_leaves_none_of_its_processes(first, cluster):
    logger.info("launch time: %.0f s", first.seconds)
    assert len(cluster.seen) > 10  # daemons of two nodes and the workers of the launches
    assert cluster.stop() == []
    mentions = [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(cluster.temp_dir) in " ".join(p.info["cmdline"] or [])
    ]
    assert mentions == []  # nothing else of the cluster's (its session folder is in every daemon's command)
