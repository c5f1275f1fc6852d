"""The GPU timing path on a CPU machine: CudaTimer against a stand-in for torch.cuda's events
(a clock that the op under test advances), so the bookkeeping — one event pair per iteration,
one synchronize after the loop, nothing waited on inside it, milliseconds to seconds — is
checked here; the real events ran on an H200 (benchmarks/gpu/)."""

import torch

from commbench.harness import timing


class FakeStream:
    def __init__(self):
        self.now_ms = 0.0
        self.synchronized = 0
        self.pending_records = 0


def install_fake_cuda(monkeypatch, stream: FakeStream):
    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing, "events must be created with timing enabled"
            self.at = None

        def record(self):
            self.at = stream.now_ms
            stream.pending_records += 1

        def elapsed_time(self, end):
            assert stream.synchronized, "read an event before synchronizing"
            return end.at - self.at

    def synchronize(device=None):
        stream.synchronized += 1

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)


def test_cuda_timer_times_each_iteration_between_its_own_events(monkeypatch):
    stream = FakeStream()
    install_fake_cuda(monkeypatch, stream)
    durations_ms = iter([1.5, 2.0, 0.25, 4.0])

    def op():
        assert stream.synchronized == 0, "the timed loop must not synchronize"
        stream.now_ms += next(durations_ms)

    samples = timing.CudaTimer().run(op, 4)
    assert samples == [0.0015, 0.002, 0.00025, 0.004]  # seconds
    assert stream.synchronized == 1 and stream.pending_records == 8


def test_timer_for_picks_events_on_cuda_and_perf_counter_on_cpu():
    assert isinstance(timing.timer_for(torch.device("cuda", 0)), timing.CudaTimer)
    assert isinstance(timing.timer_for(torch.device("cpu")), timing.CpuTimer)


# --cuda-graph: CudaGraphTimer against stand-ins for torch.cuda's streams and graphs. What is
# checked: one eager call then one capture of GRAPH_OPS calls per point (never per batch), the
# previous point's graph dropped, one event pair per replay, a sample = replay time / GRAPH_OPS,
# and a capture torch refuses named as such. The real capture runs on a GPU (benchmarks/gpu_check.sh).

class FakeGraphCuda:
    def __init__(self, stream: FakeStream, replay_ms: float = 2.0):
        self.stream, self.replay_ms = stream, replay_ms
        self.capturing = False
        self.eager_calls = 0
        self.captures: list[int] = []  # calls captured per graph
        self.replays = 0
        self.refuse = None  # an error message: the next capture fails with it

    def install(self, monkeypatch):
        fake = self

        class Stream:
            def wait_stream(self, other):
                pass

        class CUDAGraph:
            def __init__(self):
                self.calls = 0

            def replay(self):
                fake.replays += 1
                fake.stream.now_ms += fake.replay_ms

        class graph:
            def __init__(self, g, capture_error_mode="global"):
                assert capture_error_mode == "thread_local", "the watchdog thread must not break the capture"
                self.g = g

            def __enter__(self):
                fake.capturing = True
                fake.current = self.g

            def __exit__(self, *exc):
                fake.capturing = False
                fake.captures.append(self.g.calls)
                if fake.refuse and exc[0] is None:
                    msg, fake.refuse = fake.refuse, None
                    raise RuntimeError(msg)
                return False

        import contextlib
        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda: Stream())
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "CUDAGraph", CUDAGraph)
        monkeypatch.setattr(torch.cuda, "graph", graph)

    def op(self):
        if self.capturing:
            self.current.calls += 1
        else:
            self.eager_calls += 1


def test_graph_timer_captures_once_per_point_and_times_each_replay(monkeypatch):
    stream = FakeStream()
    install_fake_cuda(monkeypatch, stream)
    cuda = FakeGraphCuda(stream, replay_ms=2.0)
    cuda.install(monkeypatch)
    timer = timing.timer_for(torch.device("cuda", 0), timing.GRAPH_OPS)
    assert isinstance(timer, timing.CudaGraphTimer) and timer.ops_per_sample == 20

    first = timer.run(cuda.op, 2)  # warm-up: eager once, capture, replay
    later = timer.run(cuda.op, 5)  # a batch of the same point: no new capture
    assert cuda.eager_calls == 1 and cuda.captures == [20]
    assert cuda.replays == 7 and stream.pending_records == 14
    assert first + later == [0.0001] * 7  # 2 ms a replay of 20 calls: 100 us a call

    def next_point():
        cuda.op()

    timer.run(next_point, 1)
    assert cuda.captures == [20, 20] and cuda.eager_calls == 2


def test_a_collective_torch_cannot_capture_is_named_as_such(monkeypatch):
    stream = FakeStream()
    install_fake_cuda(monkeypatch, stream)
    cuda = FakeGraphCuda(stream)
    cuda.install(monkeypatch)
    cuda.refuse = "CUDA error: operation not permitted when stream is capturing\nmore lines"
    timer = timing.CudaGraphTimer(4)
    try:
        timer.run(cuda.op, 3)
    except timing.GraphCaptureFailed as exc:
        assert str(exc) == "CUDA error: operation not permitted when stream is capturing"
    else:
        raise AssertionError("a refused capture must raise GraphCaptureFailed")
    assert cuda.replays == 0
    timer.run(cuda.op, 1)  # the failed capture is not kept: the next run captures again
    assert cuda.captures == [4, 4] and cuda.replays == 1


def test_timer_for_a_gpu_with_graph_ops_zero_is_the_plain_event_loop():
    assert isinstance(timing.timer_for(torch.device("cuda", 0), 0), timing.CudaTimer)
    assert isinstance(timing.timer_for(torch.device("cpu"), 20), timing.CpuTimer)


class OneRank:
    """The group operations of Session's loop for a world of one (no process group needed)."""

    def max_(self, tensor):
        pass

    def gather(self, tensor):
        return [tensor]

    def barrier(self):
        pass


class SteadyTimer:
    """Samples alternating around 100 us a call (never precise to 1e-6); a replay of `ops` calls
    costs ops times its sample."""

    def __init__(self, ops: int):
        self.ops_per_sample = ops
        self.samples = 0

    def run(self, call, iters):
        out = [(50e-6, 150e-6)[(self.samples + i) % 2] for i in range(iters)]
        self.samples += iters
        return out


def _session(timer, **plan_fields):
    from types import SimpleNamespace

    from commbench.harness.plan import SweepPlan
    from commbench.harness.session import Session

    ctx = SimpleNamespace(plan=SweepPlan(**plan_fields), device=torch.device("cpu"))
    return Session(ctx, timer, reporter=None, writer=None, ops=OneRank())


def test_a_graph_replay_spends_its_calls_time_budget_not_one_calls():
    """--time-budget is wall time: at 100 us a call, 0.05 s holds about 500 plain iterations but
    only 25 replays of 20 calls. Per-call samples must not make the loop run 20 times too long,
    neither with the estimate from the warm-up (--precision 0) nor in the StopRule's batches."""
    for ops, expected in ((1, 500), (20, 25)):
        for precision in (0.0, 1e-6):
            timer = SteadyTimer(ops)
            session = _session(timer, time_budget=0.05, min_iters=10, max_iters=100_000, warmup=4,
                               precision=precision)
            iters = session.time_call(lambda: None).iters
            assert expected * 0.9 <= iters <= expected * 1.1, (ops, precision, iters)
