// ragged_dot(lhs[M, K], rhs[G, K, N] or [G, N, K], group_sizes[G]) -> [M, N] as XLA's own
// chlo.ragged_dot (what JAX emits on TPU), accumulated in f32 and rounded once.
func.func private @{{name}}(%lhs: {{in0}}, %rhs: {{in1}}, %gs: {{in2}}) -> {{out0}} {
    %y = "chlo.ragged_dot"(%lhs, %rhs, %gs) {ragged_dot_dimension_numbers = #chlo.ragged_dot<lhs_batching_dimensions = [], rhs_batching_dimensions = [], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [{{attr.rhs_nk+1}}], lhs_ragged_dimensions = [0], rhs_group_dimensions = [0]>, precision_config = [#chlo<precision DEFAULT>, #chlo<precision DEFAULT>]} : ({{in0}}, {{in1}}, {{in2}}) -> tensor<{{out0.d0}}x{{out0.d1}}xf32>
    %out = "stablehlo.convert"(%y) : (tensor<{{out0.d0}}x{{out0.d1}}xf32>) -> {{out0}}
    "func.return"(%out) : ({{out0}}) -> ()
}
