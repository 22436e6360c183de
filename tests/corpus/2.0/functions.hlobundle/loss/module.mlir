module @jit_flat_fn attributes {jax.uses_shape_polymorphism = true, mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<4x3xf32>, %arg2: tensor<?x4xf32>, %arg3: tensor<?x3xf32>) -> (tensor<f32> {jax.result_info = "result"}) {
    %c = stablehlo.constant dense<1> : tensor<i32>
    %0 = stablehlo.get_dimension_size %arg2, dim = 0 : (tensor<?x4xf32>) -> tensor<i32>
    %1 = stablehlo.get_dimension_size %arg3, dim = 0 : (tensor<?x3xf32>) -> tensor<i32>
    %2 = stablehlo.compare GE, %0, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%2, %0) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Expected value >= 1 for dimension variable 'b'. Using the following polymorphic shapes specifications: args[2].shape = (b, 4),args[3].shape = (b, 3). Obtained dimension variables: 'b' = {0} from specification 'b' for dimension args[2].shape[0] (= {0}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>) -> ()
    %3 = stablehlo.compare EQ, %1, %0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%3, %1, %0) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Found inconsistency between dimension size args[3].shape[0] (= {0}) and the specification 'b' (= {1}). Using the following polymorphic shapes specifications: args[2].shape = (b, 4),args[3].shape = (b, 3). Obtained dimension variables: 'b' = {1} from specification 'b' for dimension args[2].shape[0] (= {1}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>, tensor<i32>) -> ()
    %4 = call @_wrapped_jax_export_main(%0, %arg0, %arg1, %arg2, %arg3) : (tensor<i32>, tensor<3xf32>, tensor<4x3xf32>, tensor<?x4xf32>, tensor<?x3xf32>) -> tensor<f32>
    return %4 : tensor<f32>
  }
  func.func private @_wrapped_jax_export_main(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<3xf32>, %arg2: tensor<4x3xf32>, %arg3: tensor<?x4xf32>, %arg4: tensor<?x3xf32>) -> (tensor<f32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c = stablehlo.constant dense<3> : tensor<1xi32>
    %c_0 = stablehlo.constant dense<3> : tensor<i32>
    %0 = stablehlo.dot_general %arg3, %arg2, contracting_dims = [1] x [0] : (tensor<?x4xf32>, tensor<4x3xf32>) -> tensor<?x3xf32>
    %1 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<3xf32>) -> tensor<1x3xf32>
    %2 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %3 = stablehlo.concatenate %2, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %4 = stablehlo.dynamic_broadcast_in_dim %1, %3, dims = [0, 1] : (tensor<1x3xf32>, tensor<2xi32>) -> tensor<?x3xf32>
    %5 = stablehlo.add %0, %4 : tensor<?x3xf32>
    %6 = stablehlo.tanh %5 : tensor<?x3xf32>
    %7 = stablehlo.subtract %6, %arg4 : tensor<?x3xf32>
    %8 = stablehlo.multiply %7, %7 : tensor<?x3xf32>
    %9 = stablehlo.convert %arg0 : tensor<i32>
    %10 = stablehlo.multiply %9, %c_0 : tensor<i32>
    %11 = stablehlo.convert %10 : (tensor<i32>) -> tensor<f32>
    %12 = stablehlo.reduce(%8 init: %cst) applies stablehlo.add across dimensions = [0, 1] : (tensor<?x3xf32>, tensor<f32>) -> tensor<f32>
    %13 = stablehlo.divide %12, %11 : tensor<f32>
    return %13 : tensor<f32>
  }
}
