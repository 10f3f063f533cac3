# L2 throughput of the attention kernels (pbb vs swa), percent of peak
export LD_LIBRARY_PATH=$PWD/.devbundle/lib:/usr/local/cuda/lib64
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
mkdir -p $OUT/l2
for hd in 64 128; do for T in 4096 16384; do for kind in swa pbb; do
  $ncu --clock-control none --kernel-name regex:attention --launch-skip 1 --launch-count 3 --csv \
    --metrics gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,l1tex__m_xbar2l1tex_read_bytes.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_elapsed,smsp__issue_active.avg.pct_of_peak_sustained_elapsed \
    .devbundle/bin/hylo bench attention --kind $kind --hd $hd --T $T --B 4 --H 16 --iters 1 --warmup 1 > $OUT/l2/${kind}_${hd}_${T}.csv 2>&1
done; done; done
tar czf $OUT/l2.tgz -C $OUT l2 && rm -rf $OUT/l2
