// ragged_dot(lhs[M, K], rhs[G, K, N] or [G, N, K], group_sizes[G]) -> [M, N], for any PJRT
// plugin (template: src/backends/pjrt/snippet.h). Row m belongs to group #{j : m >= end_j},
// end_j the running sum of the group sizes (a triangular mask and a reduce: no loop); each row
// gathers its group's matrix, one batched dot_general at f32, rows past the sum are zeros.
func.func private @{{name}}(%lhs: {{in0}}, %rhs: {{in1}}, %gs: {{in2}}) -> {{out0}} {
    %gs64 = "stablehlo.convert"(%gs) : ({{in2}}) -> tensor<{{in1.d0}}xi64>
    %zero = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %ii = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<{{in1.d0}}x{{in1.d0}}xi64>
    %jj = "stablehlo.iota"() {iota_dimension = 1 : i64} : () -> tensor<{{in1.d0}}x{{in1.d0}}xi64>
    %tri = "stablehlo.compare"(%ii, %jj) {comparison_direction = #stablehlo<comparison_direction LE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<{{in1.d0}}x{{in1.d0}}xi64>, tensor<{{in1.d0}}x{{in1.d0}}xi64>) -> tensor<{{in1.d0}}x{{in1.d0}}xi1>
    %gsb = "stablehlo.broadcast_in_dim"(%gs64) {broadcast_dimensions = array<i64: 0>} : (tensor<{{in1.d0}}xi64>) -> tensor<{{in1.d0}}x{{in1.d0}}xi64>
    %zgg = "stablehlo.constant"() {value = dense<0> : tensor<{{in1.d0}}x{{in1.d0}}xi64>} : () -> tensor<{{in1.d0}}x{{in1.d0}}xi64>
    %part = "stablehlo.select"(%tri, %gsb, %zgg) : (tensor<{{in1.d0}}x{{in1.d0}}xi1>, tensor<{{in1.d0}}x{{in1.d0}}xi64>, tensor<{{in1.d0}}x{{in1.d0}}xi64>) -> tensor<{{in1.d0}}x{{in1.d0}}xi64>
    %ends = "stablehlo.reduce"(%part, %zero) ({
    ^bb0(%a: tensor<i64>, %b: tensor<i64>):
      %s = "stablehlo.add"(%a, %b) : (tensor<i64>, tensor<i64>) -> tensor<i64>
      "stablehlo.return"(%s) : (tensor<i64>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<{{in1.d0}}x{{in1.d0}}xi64>, tensor<i64>) -> tensor<{{in1.d0}}xi64>
    %endsb = "stablehlo.broadcast_in_dim"(%ends) {broadcast_dimensions = array<i64: 1>} : (tensor<{{in1.d0}}xi64>) -> tensor<{{in0.d0}}x{{in1.d0}}xi64>
    %rows = "stablehlo.iota"() {iota_dimension = 0 : i64} : () -> tensor<{{in0.d0}}x{{in1.d0}}xi64>
    %past = "stablehlo.compare"(%rows, %endsb) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<{{in0.d0}}x{{in1.d0}}xi64>, tensor<{{in0.d0}}x{{in1.d0}}xi64>) -> tensor<{{in0.d0}}x{{in1.d0}}xi1>
    %pasti = "stablehlo.convert"(%past) : (tensor<{{in0.d0}}x{{in1.d0}}xi1>) -> tensor<{{in0.d0}}x{{in1.d0}}xi64>
    %grp = "stablehlo.reduce"(%pasti, %zero) ({
    ^bb0(%a: tensor<i64>, %b: tensor<i64>):
      %s = "stablehlo.add"(%a, %b) : (tensor<i64>, tensor<i64>) -> tensor<i64>
      "stablehlo.return"(%s) : (tensor<i64>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<{{in0.d0}}x{{in1.d0}}xi64>, tensor<i64>) -> tensor<{{in0.d0}}xi64>
    %ng = "stablehlo.constant"() {value = dense<{{in1.d0}}> : tensor<{{in0.d0}}xi64>} : () -> tensor<{{in0.d0}}xi64>
    %valid = "stablehlo.compare"(%grp, %ng) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<{{in0.d0}}xi64>, tensor<{{in0.d0}}xi64>) -> tensor<{{in0.d0}}xi1>
    %last = "stablehlo.constant"() {value = dense<{{in1.d0-1}}> : tensor<{{in0.d0}}xi64>} : () -> tensor<{{in0.d0}}xi64>
    %idx = "stablehlo.minimum"(%grp, %last) : (tensor<{{in0.d0}}xi64>, tensor<{{in0.d0}}xi64>) -> tensor<{{in0.d0}}xi64>
    %w = "stablehlo.gather"(%rhs, %idx) {dimension_numbers = #stablehlo.gather<offset_dims = [1, 2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 1, {{in1.d1}}, {{in1.d2}}>} : ({{in1}}, tensor<{{in0.d0}}xi64>) -> tensor<{{in0.d0}}x{{in1.d1}}x{{in1.d2}}x{{in1.elem}}>
    %y = "stablehlo.dot_general"(%lhs, %w) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [{{attr.rhs_nk+1}}]>, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]} : ({{in0}}, tensor<{{in0.d0}}x{{in1.d1}}x{{in1.d2}}x{{in1.elem}}>) -> tensor<{{out0.d0}}x{{out0.d1}}xf32>
    %vb = "stablehlo.broadcast_in_dim"(%valid) {broadcast_dimensions = array<i64: 0>} : (tensor<{{in0.d0}}xi1>) -> tensor<{{out0.d0}}x{{out0.d1}}xi1>
    %zf = "stablehlo.constant"() {value = dense<0.0> : tensor<{{out0.d0}}x{{out0.d1}}xf32>} : () -> tensor<{{out0.d0}}x{{out0.d1}}xf32>
    %r = "stablehlo.select"(%vb, %y, %zf) : (tensor<{{out0.d0}}x{{out0.d1}}xi1>, tensor<{{out0.d0}}x{{out0.d1}}xf32>, tensor<{{out0.d0}}x{{out0.d1}}xf32>) -> tensor<{{out0.d0}}x{{out0.d1}}xf32>
    %out = "stablehlo.convert"(%r) : (tensor<{{out0.d0}}x{{out0.d1}}xf32>) -> {{out0}}
    "func.return"(%out) : ({{out0}}) -> ()
}
