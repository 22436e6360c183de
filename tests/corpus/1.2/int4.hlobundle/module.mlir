module @jit_flat_fn attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<6xi4>, %arg1: tensor<6xi8>) -> (tensor<6xi8> {jax.result_info = "result"}) {
    %0 = stablehlo.convert %arg0 : (tensor<6xi4>) -> tensor<6xi8>
    %c = stablehlo.constant dense<3> : tensor<i8>
    %1 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<i8>) -> tensor<6xi8>
    %2 = stablehlo.multiply %0, %1 : tensor<6xi8>
    %3 = stablehlo.add %2, %arg1 : tensor<6xi8>
    return %3 : tensor<6xi8>
  }
}
