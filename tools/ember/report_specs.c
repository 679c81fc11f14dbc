/* Datasheet figures of accelerators the report and `ember project tp` project onto when they are
 * not present. Peak figures are the vendors' dense bf16 numbers (no structured sparsity), HBM
 * bandwidth per chip, and the interconnect per chip per direction (half the bidirectional figure
 * the sources give). A projection from them is an upper bound, never a measurement, and the
 * outputs say so. The per-collective latency is an assumption, the same for every row: no
 * datasheet gives it. Update a row only with a source. */
#include "report.h"

const report_spec report_specs[] = {
    {"tpu-v5e", "TPU v5e (1 chip)", "tpu", 819, 197, 16,
     "cloud.google.com/tpu/docs/v5e: 197 TFLOP/s bf16, 16 GiB HBM2 at 819 GB/s",
     200, 10,
     "cloud.google.com/tpu/docs/v5e: ICI 400 GB/s bidirectional per chip (4 ports, 2D torus)"},
    {"tpu-v5p", "TPU v5p (1 chip)", "tpu", 2765, 459, 95,
     "cloud.google.com/tpu/docs/v5p: 459 TFLOP/s bf16, 95 GiB HBM2e at 2765 GB/s",
     600, 10,
     "cloud.google.com/tpu/docs/v5p: ICI 1200 GB/s bidirectional per chip (3D torus)"},
    {"tpu-v6e", "TPU v6e Trillium (1 chip)", "tpu", 1640, 918, 32,
     "cloud.google.com/tpu/docs/v6e: 918 TFLOP/s bf16, 32 GiB HBM at 1640 GB/s",
     400, 10,
     "cloud.google.com/tpu/docs/v6e: ICI 800 GB/s bidirectional per chip (4 ports, 2D torus)"},
    {"a100", "NVIDIA A100 80GB SXM", "cuda", 2039, 312, 80e9 / 1073741824.0,
     "NVIDIA A100 datasheet: 312 TFLOP/s bf16 dense, 80 GB HBM2e at 2039 GB/s",
     300, 10,
     "NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional per GPU"},
    {"h100", "NVIDIA H100 SXM", "cuda", 3350, 989, 80e9 / 1073741824.0,
     "NVIDIA H100 datasheet: 989 TFLOP/s bf16 dense, 80 GB HBM3 at 3.35 TB/s",
     450, 10,
     "NVIDIA H100 datasheet: NVLink 900 GB/s bidirectional per GPU"},
    {"h200", "NVIDIA H200 SXM", "cuda", 4800, 989, 141e9 / 1073741824.0,
     "NVIDIA H200 datasheet: 989 TFLOP/s bf16 dense, 141 GB HBM3e at 4.8 TB/s",
     450, 10,
     "NVIDIA H200 datasheet: NVLink 900 GB/s bidirectional per GPU"},
    {"l4", "NVIDIA L4", "cuda", 300, 121, 24e9 / 1073741824.0,
     "NVIDIA L4 datasheet: 121 TFLOP/s bf16 dense, 24 GB GDDR6 at 300 GB/s",
     32, 10,
     "NVIDIA L4 datasheet: PCIe Gen4 x16, 64 GB/s bidirectional (no NVLink)"},
};
const int report_n_specs = (int)(sizeof report_specs / sizeof report_specs[0]);
