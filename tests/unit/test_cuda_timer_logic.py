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
