module @jit_flat_fn attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2x4xf32>) -> (tensor<2x4xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.exp2 %arg0 : tensor<2x4xf32>
    return %0 : tensor<2x4xf32>
  }
}
