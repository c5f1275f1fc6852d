"""Makes all_reduce_split_mod8_2node_16xH100.txt from the recorded all_reduce_2node_16xH100.txt, as
nccl-tests 2.19.6 (../shared/vendor/nccl-tests) would print that run under NCCL_TESTS_SPLIT="MOD 8":
each Rank line's Group is the rank's color, rank % 8 (src/common.cu run(), lines 1496-1520), printed
with util.cu's "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" (line 687);
every result row is printed again with util.cu's formats (writeBenchmarkLinePreamble "%12li  %12li
%8s  %6s  %6s", writeBenchmarkLineBody "  %7s  %6s  %6s  %6g", getFloatStr), keeping the recorded
times and taking algbw and busbw as all_reduce.cu's AllReduceGetBw does for a group of 2 ranks
(nProcs is the group's size, common.cu line 1524): busbw = algbw x 2(2-1)/2; the average bus
bandwidth as common.cu line 1831 (the mean of every printed busbw). Run: python make_split_fixture.py
"""

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPLIT, GROUP = 8, 2  # MOD 8 on 16 ranks: groups {r, r + 8}


def float_str(value: float, width: int) -> str:
    """util.cu getFloatStr."""
    for fmt in (f"{value:{width}.2f}", f"{value:{width}.1f}", f"{value:{width}.0f}"):
        if len(fmt) <= width:
            return fmt
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def half(size: int, time_us: float) -> tuple[str, float]:
    alg = size / 1.0e9 / (time_us / 1e6)
    bus = alg * (2 * (GROUP - 1)) / GROUP
    return f"  {float_str(time_us, 7)}  {float_str(alg, 6)}  {float_str(bus, 6)}  {0:6g}", bus


def main() -> None:
    out, buses = [], []
    rank_line = re.compile(r"^#  Rank\s+(\d+) Group\s+\d+ Pid\s+(\d+) on\s+(\S+) device\s+(\d+) "
                           r"\[(\w+):(\w+):(\w+)\] (.*)$")
    for line in (HERE / "all_reduce_2node_16xH100.txt").read_text().splitlines():
        if m := rank_line.match(line):
            rank = int(m.group(1))
            out.append(f"#  Rank {rank:2d} Group {rank % SPLIT:2d} Pid {int(m.group(2)):6d} "
                       f"on {m.group(3):>10s} device "
                       f"{int(m.group(4)):2d} [{int(m.group(5), 16):04x}:{int(m.group(6), 16):02x}:"
                       f"{int(m.group(7), 16):02x}] {m.group(8)}")
        elif line.strip() and line.split()[0].isdigit():
            f = line.split()
            size, count = int(f[0]), int(f[1])
            row = f"{size:12d}  {count:12d}  {f[2]:>8s}  {f[3]:>6s}  {int(f[4]):6d}"
            for t in (float(f[5]), float(f[9])):
                text, bus = half(size, t)
                row += text
                buses.append(bus)
            out.append(row)
        elif line.startswith("# Avg bus bandwidth"):
            out.append(f"# {'Avg bus bandwidth':<20s} : {sum(buses) / len(buses):g} ")
        else:
            out.append(line)
    (HERE / "all_reduce_split_mod8_2node_16xH100.txt").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
