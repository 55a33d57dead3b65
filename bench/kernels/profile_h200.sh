#!/bin/bash
# Nsight Compute over the recurrent kernels of a few 8 MiB tables (one pool through the strided
# kernel; 2, 4, 8 and 96 pools of different row sizes through every general kernel), to see where a
# gather's time goes against the strided kernel's: duration, occupancy, warp stall reasons a issued
# instruction, DRAM and L2. On the GPU machine, with the binaries of scripts/pack_gpu.sh carried:
#
#   bash bench/kernels/profile_h200.sh [DIR]        (DIR default build-gpu; about a minute)
#
# Each kernel is profiled once, launched alone after a warm-up over every copy of its table
# (MSTAR_BENCH_PROFILE in recurrent_bench.cu); caches are not flushed and clocks are not locked, as in
# the benchmark. Writes $OUT/kernels_profile.ncu-rep, $OUT/kernels_profile.csv (the raw page),
# $OUT/kernels_source.csv (stall samples a SASS instruction), $OUT/kernels_profile.txt (the order
# of the launches) and $OUT/kernels_ncu.log (Nsight Compute's own messages); summarize with
#   python3 bench/kernels/profile_view.py $OUT/kernels_profile.csv $OUT/kernels_profile.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
D=${1:-build-gpu}
R=${OUT:?set OUT to the folder the report goes to}
export LD_LIBRARY_PATH=$PWD/$D/lib:${LD_LIBRARY_PATH:-}
TABLES=${PROFILE_TABLES:-"8 x 4 KiB (strided) @128;4 x 12 KiB (table) @64;2|6|10|14 KiB (table) @64;alt. (table) @64;1|2|3|4 KiB (table) @20"}
MSTAR_BENCH_PROFILE=$TABLES ncu --profile-from-start off --cache-control none --clock-control none \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section SourceCounters --warp-sampling-interval 0 --import-source no \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__average_warp_latency_per_inst_issued.ratio,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__warps_launched.sum,sm__cycles_active.avg" \
  --log-file "$R/kernels_ncu.log" -f -o "$R/kernels_profile" "$D/mstar_recurrent_bench" > "$R/kernels_profile.txt" \
  2> "$R/kernels_profile.err"
rc=$?
echo "ncu rc $rc; $(grep -c '^profiled' "$R/kernels_profile.txt") launches profiled"
tail -3 "$R/kernels_profile.err"
ncu --import "$R/kernels_profile.ncu-rep" --csv --page raw > "$R/kernels_profile.csv" 2>> "$R/kernels_profile.err"
# Per SASS instruction: where the warps stalled (sampled every 32 cycles), to read against the kernels.
ncu --import "$R/kernels_profile.ncu-rep" --csv --page source --print-source sass > "$R/kernels_source.csv" 2>> "$R/kernels_profile.err" ||
  echo "the source page did not export (see kernels_profile.err)"
python3 bench/kernels/profile_view.py "$R/kernels_profile.csv" "$R/kernels_profile.txt"
