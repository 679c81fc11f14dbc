/* Kernel families whose CPU kernels have not landed yet: their ops report "no kernel". */
#include "backends/cpu/cpu.h"

void em_cpu_register_linalg(em_kernel_fn *k) { (void)k; }
void em_cpu_register_nn(em_kernel_fn *k) { (void)k; }
void em_cpu_register_index(em_kernel_fn *k) { (void)k; }
void em_cpu_register_conv(em_kernel_fn *k) { (void)k; }
void em_cpu_register_moe(em_kernel_fn *k) { (void)k; }
