/* Datasheet figures of accelerators the report projects onto when they are not present. Peak
 * figures are the vendors' dense bf16 numbers (no structured sparsity) and HBM bandwidth per
 * chip; a projection from them is an upper bound, never a measurement, and the report says so.
 * Update a row only with a source. */
#include "report.h"

const report_spec report_specs[] = {
    {"tpu-v5e", "TPU v5e (1 chip)", "tpu", 819, 197, 16,
     "cloud.google.com/tpu/docs/v5e: 197 TFLOP/s bf16, 16 GiB HBM2 at 819 GB/s"},
    {"tpu-v5p", "TPU v5p (1 chip)", "tpu", 2765, 459, 95,
     "cloud.google.com/tpu/docs/v5p: 459 TFLOP/s bf16, 95 GiB HBM2e at 2765 GB/s"},
    {"tpu-v6e", "TPU v6e Trillium (1 chip)", "tpu", 1640, 918, 32,
     "cloud.google.com/tpu/docs/v6e: 918 TFLOP/s bf16, 32 GiB HBM at 1640 GB/s"},
    {"a100", "NVIDIA A100 80GB SXM", "cuda", 2039, 312, 80e9 / 1073741824.0,
     "NVIDIA A100 datasheet: 312 TFLOP/s bf16 dense, 80 GB HBM2e at 2039 GB/s"},
    {"h100", "NVIDIA H100 SXM", "cuda", 3350, 989, 80e9 / 1073741824.0,
     "NVIDIA H100 datasheet: 989 TFLOP/s bf16 dense, 80 GB HBM3 at 3.35 TB/s"},
    {"h200", "NVIDIA H200 SXM", "cuda", 4800, 989, 141e9 / 1073741824.0,
     "NVIDIA H200 datasheet: 989 TFLOP/s bf16 dense, 141 GB HBM3e at 4.8 TB/s"},
    {"l4", "NVIDIA L4", "cuda", 300, 121, 24e9 / 1073741824.0,
     "NVIDIA L4 datasheet: 121 TFLOP/s bf16 dense, 24 GB GDDR6 at 300 GB/s"},
};
const int report_n_specs = (int)(sizeof report_specs / sizeof report_specs[0]);
