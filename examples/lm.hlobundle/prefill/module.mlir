module @jit_flat_fn attributes {jax.uses_shape_polymorphism = true, mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<256x128xf32>, %arg1: tensor<512x128xf32>, %arg2: tensor<128xf32>, %arg3: tensor<128xf32>, %arg4: tensor<128x128xf32>, %arg5: tensor<128x384xf32>, %arg6: tensor<128x512xf32>, %arg7: tensor<512x128xf32>, %arg8: tensor<128xf32>, %arg9: tensor<128xf32>, %arg10: tensor<128x128xf32>, %arg11: tensor<128x384xf32>, %arg12: tensor<128x512xf32>, %arg13: tensor<128xf32>, %arg14: tensor<128x128xf32>, %arg15: tensor<?x?xi32>) -> (tensor<?x256xf32> {jax.result_info = "result[0]"}, tensor<2x?x4x128x32xf32> {jax.result_info = "result[1]['k']"}, tensor<?xi32> {jax.result_info = "result[1]['pos']"}, tensor<2x?x4x128x32xf32> {jax.result_info = "result[1]['v']"}) {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<128> : tensor<i32>
    %c_1 = stablehlo.constant dense<-1> : tensor<i32>
    %c_2 = stablehlo.constant dense<1> : tensor<i32>
    %0 = stablehlo.get_dimension_size %arg15, dim = 0 : (tensor<?x?xi32>) -> tensor<i32>
    %1 = stablehlo.get_dimension_size %arg15, dim = 1 : (tensor<?x?xi32>) -> tensor<i32>
    %2 = stablehlo.compare GE, %0, %c_2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%2, %0) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Expected value >= 1 for dimension variable 'b'. Using the following polymorphic shapes specifications: args[15].shape = (b, s). Obtained dimension variables: 'b' = {0} from specification 'b' for dimension args[15].shape[0] (= {0}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>) -> ()
    %3 = stablehlo.compare GE, %1, %c_2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%3, %0, %1) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Expected value >= 1 for dimension variable 's'. Using the following polymorphic shapes specifications: args[15].shape = (b, s). Obtained dimension variables: 'b' = {0} from specification 'b' for dimension args[15].shape[0] (= {0}), 's' = {1} from specification 's' for dimension args[15].shape[1] (= {1}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>, tensor<i32>) -> ()
    %4 = stablehlo.convert %1 : tensor<i32>
    %5 = stablehlo.multiply %4, %c_1 : tensor<i32>
    %6 = stablehlo.add %5, %c_0 : tensor<i32>
    %7 = stablehlo.compare GE, %6, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %8 = stablehlo.convert %1 : tensor<i32>
    %9 = stablehlo.multiply %8, %c_1 : tensor<i32>
    %10 = stablehlo.add %9, %c_0 : tensor<i32>
    stablehlo.custom_call @shape_assertion(%7, %10, %0, %1) {api_version = 2 : i32, error_message = "Input shapes do not match the symbolic shape constraint s <= 128. Expected '- s + 128' to be greater or equal to 0, but found {0}.  Using the following polymorphic shapes specifications: args[15].shape = (b, s). Obtained dimension variables: 'b' = {1} from specification 'b' for dimension args[15].shape[0] (= {1}), 's' = {2} from specification 's' for dimension args[15].shape[1] (= {2}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>, tensor<i32>, tensor<i32>) -> ()
    %11:4 = call @_wrapped_jax_export_main(%0, %1, %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8, %arg9, %arg10, %arg11, %arg12, %arg13, %arg14, %arg15) : (tensor<i32>, tensor<i32>, tensor<256x128xf32>, tensor<512x128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>, tensor<128x384xf32>, tensor<128x512xf32>, tensor<512x128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>, tensor<128x384xf32>, tensor<128x512xf32>, tensor<128xf32>, tensor<128x128xf32>, tensor<?x?xi32>) -> (tensor<?x256xf32>, tensor<2x?x4x128x32xf32>, tensor<?xi32>, tensor<2x?x4x128x32xf32>)
    return %11#0, %11#1, %11#2, %11#3 : tensor<?x256xf32>, tensor<2x?x4x128x32xf32>, tensor<?xi32>, tensor<2x?x4x128x32xf32>
  }
  func.func private @_wrapped_jax_export_main(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<i32> {jax.global_constant = "s"}, %arg2: tensor<256x128xf32>, %arg3: tensor<512x128xf32>, %arg4: tensor<128xf32>, %arg5: tensor<128xf32>, %arg6: tensor<128x128xf32>, %arg7: tensor<128x384xf32>, %arg8: tensor<128x512xf32>, %arg9: tensor<512x128xf32>, %arg10: tensor<128xf32>, %arg11: tensor<128xf32>, %arg12: tensor<128x128xf32>, %arg13: tensor<128x384xf32>, %arg14: tensor<128x512xf32>, %arg15: tensor<128xf32>, %arg16: tensor<128x128xf32>, %arg17: tensor<?x?xi32>) -> (tensor<?x256xf32> {jax.result_info = "result[0]"}, tensor<2x?x4x128x32xf32> {jax.result_info = "result[1]['k']"}, tensor<?xi32> {jax.result_info = "result[1]['pos']"}, tensor<2x?x4x128x32xf32> {jax.result_info = "result[1]['v']"}) {
    %c = stablehlo.constant dense<-1> : tensor<i32>
    %c_0 = stablehlo.constant dense<2> : tensor<1xi32>
    %cst = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %cst_1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %c_3 = stablehlo.constant dense<512> : tensor<1xi32>
    %cst_4 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %cst_5 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %cst_6 = stablehlo.constant dense<-1.000000e+09> : tensor<f32>
    %cst_7 = stablehlo.constant dense<5.65685415> : tensor<f32>
    %c_8 = stablehlo.constant dense<32> : tensor<1xi32>
    %c_9 = stablehlo.constant dense<4> : tensor<1xi32>
    %c_10 = stablehlo.constant dense<384> : tensor<1xi32>
    %c_11 = stablehlo.constant dense<256> : tensor<1xi32>
    %c_12 = stablehlo.constant dense<0> : tensor<1xi32>
    %cst_13 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_14 = stablehlo.constant dense<1.280000e+02> : tensor<f32>
    %cst_15 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c_16 = stablehlo.constant dense<true> : tensor<i1>
    %c_17 = stablehlo.constant dense<128> : tensor<1xi32>
    %c_18 = stablehlo.constant dense<1> : tensor<1xi32>
    %c_19 = stablehlo.constant dense<256> : tensor<i32>
    %c_20 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %1 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %2 = stablehlo.concatenate %0, %1, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %3 = stablehlo.dynamic_broadcast_in_dim %c_20, %2, dims = [] : (tensor<i32>, tensor<2xi32>) -> tensor<?x?xi32>
    %4 = stablehlo.compare LT, %arg17, %3, SIGNED : (tensor<?x?xi32>, tensor<?x?xi32>) -> tensor<?x?xi1>
    %5 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %6 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %7 = stablehlo.concatenate %5, %6, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %8 = stablehlo.dynamic_broadcast_in_dim %c_19, %7, dims = [] : (tensor<i32>, tensor<2xi32>) -> tensor<?x?xi32>
    %9 = stablehlo.add %arg17, %8 : tensor<?x?xi32>
    %10 = stablehlo.select %4, %9, %arg17 : tensor<?x?xi1>, tensor<?x?xi32>
    %11 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %12 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %13 = stablehlo.concatenate %11, %12, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %14 = stablehlo.dynamic_broadcast_in_dim %10, %13, dims = [0, 1] : (tensor<?x?xi32>, tensor<3xi32>) -> tensor<?x?x1xi32>
    %15 = "stablehlo.gather"(%arg2, %14) <{dimension_numbers = #stablehlo.gather<offset_dims = [2], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 2>, slice_sizes = array<i64: 1, 128>}> : (tensor<256x128xf32>, tensor<?x?x1xi32>) -> tensor<?x?x128xf32>
    %16 = stablehlo.broadcast_in_dim %c_20, dims = [] : (tensor<i32>) -> tensor<1xi32>
    %17 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %18 = stablehlo.concatenate %17, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %19 = "stablehlo.dynamic_gather"(%arg16, %16, %18) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 1], start_index_map = [0]>, indices_are_sorted = true}> : (tensor<128x128xf32>, tensor<1xi32>, tensor<2xi32>) -> tensor<?x128xf32>
    %20 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %21 = stablehlo.concatenate %c_18, %20, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %22 = stablehlo.dynamic_broadcast_in_dim %19, %21, dims = [1, 2] : (tensor<?x128xf32>, tensor<3xi32>) -> tensor<1x?x128xf32>
    %23 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %24 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %25 = stablehlo.concatenate %23, %24, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %26 = stablehlo.dynamic_broadcast_in_dim %22, %25, dims = [0, 1, 2] : (tensor<1x?x128xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %27 = stablehlo.add %15, %26 : tensor<?x?x128xf32>
    %28 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %29 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %30 = stablehlo.concatenate %28, %29, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %31 = stablehlo.dynamic_broadcast_in_dim %c_16, %30, dims = [] : (tensor<i1>, tensor<2xi32>) -> tensor<?x?xi1>
    %32 = call @tril(%arg0, %arg1, %31) : (tensor<i32>, tensor<i32>, tensor<?x?xi1>) -> tensor<?x?xi1>
    %33 = stablehlo.multiply %27, %27 : tensor<?x?x128xf32>
    %34 = stablehlo.reduce(%33 init: %cst_15) applies stablehlo.add across dimensions = [2] : (tensor<?x?x128xf32>, tensor<f32>) -> tensor<?x?xf32>
    %35 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %36 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %37 = stablehlo.concatenate %35, %36, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %38 = stablehlo.dynamic_broadcast_in_dim %34, %37, dims = [0, 1] : (tensor<?x?xf32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %39 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %40 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %41 = stablehlo.concatenate %39, %40, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %42 = stablehlo.dynamic_broadcast_in_dim %cst_14, %41, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %43 = stablehlo.divide %38, %42 : tensor<?x?x1xf32>
    %44 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %45 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %46 = stablehlo.concatenate %44, %45, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %47 = stablehlo.dynamic_broadcast_in_dim %cst_13, %46, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %48 = stablehlo.add %43, %47 : tensor<?x?x1xf32>
    %49 = stablehlo.rsqrt %48 : tensor<?x?x1xf32>
    %50 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %51 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %52 = stablehlo.concatenate %50, %51, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %53 = stablehlo.dynamic_broadcast_in_dim %49, %52, dims = [0, 1, 2] : (tensor<?x?x1xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %54 = stablehlo.multiply %27, %53 : tensor<?x?x128xf32>
    %55 = stablehlo.broadcast_in_dim %arg4, dims = [2] : (tensor<128xf32>) -> tensor<1x1x128xf32>
    %56 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %57 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %58 = stablehlo.concatenate %56, %57, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %59 = stablehlo.dynamic_broadcast_in_dim %55, %58, dims = [0, 1, 2] : (tensor<1x1x128xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %60 = stablehlo.multiply %54, %59 : tensor<?x?x128xf32>
    %61 = stablehlo.dot_general %60, %arg7, contracting_dims = [2] x [0] : (tensor<?x?x128xf32>, tensor<128x384xf32>) -> tensor<?x?x384xf32>
    %62 = stablehlo.concatenate %c_12, %c_12, %c_12, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %63 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %64 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %65 = stablehlo.concatenate %63, %64, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %66 = stablehlo.concatenate %c_18, %c_18, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %67 = stablehlo.real_dynamic_slice %61, %62, %65, %66 : (tensor<?x?x384xf32>, tensor<3xi32>, tensor<3xi32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %68 = stablehlo.concatenate %c_12, %c_12, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %69 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %70 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %71 = stablehlo.concatenate %69, %70, %c_11, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %72 = stablehlo.concatenate %c_18, %c_18, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %73 = stablehlo.real_dynamic_slice %61, %68, %71, %72 : (tensor<?x?x384xf32>, tensor<3xi32>, tensor<3xi32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %74 = stablehlo.concatenate %c_12, %c_12, %c_11, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %75 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %76 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %77 = stablehlo.concatenate %75, %76, %c_10, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %78 = stablehlo.concatenate %c_18, %c_18, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %79 = stablehlo.real_dynamic_slice %61, %74, %77, %78 : (tensor<?x?x384xf32>, tensor<3xi32>, tensor<3xi32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %80 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %81 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %82 = stablehlo.concatenate %80, %81, %c_9, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %83 = stablehlo.dynamic_reshape %67, %82 : (tensor<?x?x128xf32>, tensor<4xi32>) -> tensor<?x?x4x32xf32>
    %84 = stablehlo.transpose %83, dims = [0, 2, 1, 3] : (tensor<?x?x4x32xf32>) -> tensor<?x4x?x32xf32>
    %85 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %86 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %87 = stablehlo.concatenate %85, %86, %c_9, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %88 = stablehlo.dynamic_reshape %73, %87 : (tensor<?x?x128xf32>, tensor<4xi32>) -> tensor<?x?x4x32xf32>
    %89 = stablehlo.transpose %88, dims = [0, 2, 1, 3] : (tensor<?x?x4x32xf32>) -> tensor<?x4x?x32xf32>
    %90 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %91 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %92 = stablehlo.concatenate %90, %91, %c_9, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %93 = stablehlo.dynamic_reshape %79, %92 : (tensor<?x?x128xf32>, tensor<4xi32>) -> tensor<?x?x4x32xf32>
    %94 = stablehlo.transpose %93, dims = [0, 2, 1, 3] : (tensor<?x?x4x32xf32>) -> tensor<?x4x?x32xf32>
    %95 = stablehlo.transpose %89, dims = [0, 1, 3, 2] : (tensor<?x4x?x32xf32>) -> tensor<?x4x32x?xf32>
    %96 = stablehlo.dot_general %84, %95, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<?x4x?x32xf32>, tensor<?x4x32x?xf32>) -> tensor<?x4x?x?xf32>
    %97 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %98 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %99 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %100 = stablehlo.concatenate %97, %c_9, %98, %99, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %101 = stablehlo.dynamic_broadcast_in_dim %cst_7, %100, dims = [] : (tensor<f32>, tensor<4xi32>) -> tensor<?x4x?x?xf32>
    %102 = stablehlo.divide %96, %101 : tensor<?x4x?x?xf32>
    %103 = call @_where(%arg0, %arg1, %32, %102, %cst_6) : (tensor<i32>, tensor<i32>, tensor<?x?xi1>, tensor<?x4x?x?xf32>, tensor<f32>) -> tensor<?x4x?x?xf32>
    %104 = stablehlo.reduce(%103 init: %cst_5) applies stablehlo.maximum across dimensions = [3] : (tensor<?x4x?x?xf32>, tensor<f32>) -> tensor<?x4x?xf32>
    %105 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %106 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %107 = stablehlo.concatenate %105, %c_9, %106, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %108 = stablehlo.dynamic_broadcast_in_dim %cst_5, %107, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x4x?xf32>
    %109 = stablehlo.maximum %108, %104 : tensor<?x4x?xf32>
    %110 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %111 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %112 = stablehlo.concatenate %110, %c_9, %111, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %113 = stablehlo.dynamic_broadcast_in_dim %109, %112, dims = [0, 1, 2] : (tensor<?x4x?xf32>, tensor<4xi32>) -> tensor<?x4x?x1xf32>
    %114 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %115 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %116 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %117 = stablehlo.concatenate %114, %c_9, %115, %116, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %118 = stablehlo.dynamic_broadcast_in_dim %113, %117, dims = [0, 1, 2, 3] : (tensor<?x4x?x1xf32>, tensor<4xi32>) -> tensor<?x4x?x?xf32>
    %119 = stablehlo.subtract %103, %118 : tensor<?x4x?x?xf32>
    %120 = stablehlo.exponential %119 : tensor<?x4x?x?xf32>
    %121 = stablehlo.reduce(%120 init: %cst_15) applies stablehlo.add across dimensions = [3] : (tensor<?x4x?x?xf32>, tensor<f32>) -> tensor<?x4x?xf32>
    %122 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %123 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %124 = stablehlo.concatenate %122, %c_9, %123, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %125 = stablehlo.dynamic_broadcast_in_dim %121, %124, dims = [0, 1, 2] : (tensor<?x4x?xf32>, tensor<4xi32>) -> tensor<?x4x?x1xf32>
    %126 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %127 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %128 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %129 = stablehlo.concatenate %126, %c_9, %127, %128, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %130 = stablehlo.dynamic_broadcast_in_dim %125, %129, dims = [0, 1, 2, 3] : (tensor<?x4x?x1xf32>, tensor<4xi32>) -> tensor<?x4x?x?xf32>
    %131 = stablehlo.divide %120, %130 : tensor<?x4x?x?xf32>
    %132 = stablehlo.dot_general %131, %94, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<?x4x?x?xf32>, tensor<?x4x?x32xf32>) -> tensor<?x4x?x32xf32>
    %133 = stablehlo.transpose %132, dims = [0, 2, 1, 3] : (tensor<?x4x?x32xf32>) -> tensor<?x?x4x32xf32>
    %134 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %135 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %136 = stablehlo.concatenate %134, %135, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %137 = stablehlo.dynamic_reshape %133, %136 : (tensor<?x?x4x32xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %138 = stablehlo.dot_general %137, %arg6, contracting_dims = [2] x [0] : (tensor<?x?x128xf32>, tensor<128x128xf32>) -> tensor<?x?x128xf32>
    %139 = stablehlo.add %27, %138 : tensor<?x?x128xf32>
    %140 = stablehlo.multiply %139, %139 : tensor<?x?x128xf32>
    %141 = stablehlo.reduce(%140 init: %cst_15) applies stablehlo.add across dimensions = [2] : (tensor<?x?x128xf32>, tensor<f32>) -> tensor<?x?xf32>
    %142 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %143 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %144 = stablehlo.concatenate %142, %143, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %145 = stablehlo.dynamic_broadcast_in_dim %141, %144, dims = [0, 1] : (tensor<?x?xf32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %146 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %147 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %148 = stablehlo.concatenate %146, %147, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %149 = stablehlo.dynamic_broadcast_in_dim %cst_14, %148, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %150 = stablehlo.divide %145, %149 : tensor<?x?x1xf32>
    %151 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %152 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %153 = stablehlo.concatenate %151, %152, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %154 = stablehlo.dynamic_broadcast_in_dim %cst_13, %153, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %155 = stablehlo.add %150, %154 : tensor<?x?x1xf32>
    %156 = stablehlo.rsqrt %155 : tensor<?x?x1xf32>
    %157 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %158 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %159 = stablehlo.concatenate %157, %158, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %160 = stablehlo.dynamic_broadcast_in_dim %156, %159, dims = [0, 1, 2] : (tensor<?x?x1xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %161 = stablehlo.multiply %139, %160 : tensor<?x?x128xf32>
    %162 = stablehlo.broadcast_in_dim %arg5, dims = [2] : (tensor<128xf32>) -> tensor<1x1x128xf32>
    %163 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %164 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %165 = stablehlo.concatenate %163, %164, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %166 = stablehlo.dynamic_broadcast_in_dim %162, %165, dims = [0, 1, 2] : (tensor<1x1x128xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %167 = stablehlo.multiply %161, %166 : tensor<?x?x128xf32>
    %168 = stablehlo.dot_general %167, %arg8, contracting_dims = [2] x [0] : (tensor<?x?x128xf32>, tensor<128x512xf32>) -> tensor<?x?x512xf32>
    %169 = stablehlo.multiply %168, %168 : tensor<?x?x512xf32>
    %170 = stablehlo.multiply %169, %168 : tensor<?x?x512xf32>
    %171 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %172 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %173 = stablehlo.concatenate %171, %172, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %174 = stablehlo.dynamic_broadcast_in_dim %cst_4, %173, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x512xf32>
    %175 = stablehlo.multiply %174, %170 : tensor<?x?x512xf32>
    %176 = stablehlo.add %168, %175 : tensor<?x?x512xf32>
    %177 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %178 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %179 = stablehlo.concatenate %177, %178, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %180 = stablehlo.dynamic_broadcast_in_dim %cst_2, %179, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x512xf32>
    %181 = stablehlo.multiply %180, %176 : tensor<?x?x512xf32>
    %182 = stablehlo.tanh %181 : tensor<?x?x512xf32>
    %183 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %184 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %185 = stablehlo.concatenate %183, %184, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %186 = stablehlo.dynamic_broadcast_in_dim %cst_1, %185, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x512xf32>
    %187 = stablehlo.add %186, %182 : tensor<?x?x512xf32>
    %188 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %189 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %190 = stablehlo.concatenate %188, %189, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %191 = stablehlo.dynamic_broadcast_in_dim %cst, %190, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x512xf32>
    %192 = stablehlo.multiply %191, %187 : tensor<?x?x512xf32>
    %193 = stablehlo.multiply %168, %192 : tensor<?x?x512xf32>
    %194 = stablehlo.dot_general %193, %arg3, contracting_dims = [2] x [0] : (tensor<?x?x512xf32>, tensor<512x128xf32>) -> tensor<?x?x128xf32>
    %195 = stablehlo.add %139, %194 : tensor<?x?x128xf32>
    %196 = stablehlo.multiply %195, %195 : tensor<?x?x128xf32>
    %197 = stablehlo.reduce(%196 init: %cst_15) applies stablehlo.add across dimensions = [2] : (tensor<?x?x128xf32>, tensor<f32>) -> tensor<?x?xf32>
    %198 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %199 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %200 = stablehlo.concatenate %198, %199, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %201 = stablehlo.dynamic_broadcast_in_dim %197, %200, dims = [0, 1] : (tensor<?x?xf32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %202 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %203 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %204 = stablehlo.concatenate %202, %203, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %205 = stablehlo.dynamic_broadcast_in_dim %cst_14, %204, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %206 = stablehlo.divide %201, %205 : tensor<?x?x1xf32>
    %207 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %208 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %209 = stablehlo.concatenate %207, %208, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %210 = stablehlo.dynamic_broadcast_in_dim %cst_13, %209, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %211 = stablehlo.add %206, %210 : tensor<?x?x1xf32>
    %212 = stablehlo.rsqrt %211 : tensor<?x?x1xf32>
    %213 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %214 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %215 = stablehlo.concatenate %213, %214, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %216 = stablehlo.dynamic_broadcast_in_dim %212, %215, dims = [0, 1, 2] : (tensor<?x?x1xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %217 = stablehlo.multiply %195, %216 : tensor<?x?x128xf32>
    %218 = stablehlo.broadcast_in_dim %arg10, dims = [2] : (tensor<128xf32>) -> tensor<1x1x128xf32>
    %219 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %220 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %221 = stablehlo.concatenate %219, %220, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %222 = stablehlo.dynamic_broadcast_in_dim %218, %221, dims = [0, 1, 2] : (tensor<1x1x128xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %223 = stablehlo.multiply %217, %222 : tensor<?x?x128xf32>
    %224 = stablehlo.dot_general %223, %arg13, contracting_dims = [2] x [0] : (tensor<?x?x128xf32>, tensor<128x384xf32>) -> tensor<?x?x384xf32>
    %225 = stablehlo.concatenate %c_12, %c_12, %c_12, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %226 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %227 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %228 = stablehlo.concatenate %226, %227, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %229 = stablehlo.concatenate %c_18, %c_18, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %230 = stablehlo.real_dynamic_slice %224, %225, %228, %229 : (tensor<?x?x384xf32>, tensor<3xi32>, tensor<3xi32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %231 = stablehlo.concatenate %c_12, %c_12, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %232 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %233 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %234 = stablehlo.concatenate %232, %233, %c_11, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %235 = stablehlo.concatenate %c_18, %c_18, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %236 = stablehlo.real_dynamic_slice %224, %231, %234, %235 : (tensor<?x?x384xf32>, tensor<3xi32>, tensor<3xi32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %237 = stablehlo.concatenate %c_12, %c_12, %c_11, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %238 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %239 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %240 = stablehlo.concatenate %238, %239, %c_10, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %241 = stablehlo.concatenate %c_18, %c_18, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %242 = stablehlo.real_dynamic_slice %224, %237, %240, %241 : (tensor<?x?x384xf32>, tensor<3xi32>, tensor<3xi32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %243 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %244 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %245 = stablehlo.concatenate %243, %244, %c_9, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %246 = stablehlo.dynamic_reshape %230, %245 : (tensor<?x?x128xf32>, tensor<4xi32>) -> tensor<?x?x4x32xf32>
    %247 = stablehlo.transpose %246, dims = [0, 2, 1, 3] : (tensor<?x?x4x32xf32>) -> tensor<?x4x?x32xf32>
    %248 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %249 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %250 = stablehlo.concatenate %248, %249, %c_9, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %251 = stablehlo.dynamic_reshape %236, %250 : (tensor<?x?x128xf32>, tensor<4xi32>) -> tensor<?x?x4x32xf32>
    %252 = stablehlo.transpose %251, dims = [0, 2, 1, 3] : (tensor<?x?x4x32xf32>) -> tensor<?x4x?x32xf32>
    %253 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %254 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %255 = stablehlo.concatenate %253, %254, %c_9, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %256 = stablehlo.dynamic_reshape %242, %255 : (tensor<?x?x128xf32>, tensor<4xi32>) -> tensor<?x?x4x32xf32>
    %257 = stablehlo.transpose %256, dims = [0, 2, 1, 3] : (tensor<?x?x4x32xf32>) -> tensor<?x4x?x32xf32>
    %258 = stablehlo.transpose %252, dims = [0, 1, 3, 2] : (tensor<?x4x?x32xf32>) -> tensor<?x4x32x?xf32>
    %259 = stablehlo.dot_general %247, %258, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<?x4x?x32xf32>, tensor<?x4x32x?xf32>) -> tensor<?x4x?x?xf32>
    %260 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %261 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %262 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %263 = stablehlo.concatenate %260, %c_9, %261, %262, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %264 = stablehlo.dynamic_broadcast_in_dim %cst_7, %263, dims = [] : (tensor<f32>, tensor<4xi32>) -> tensor<?x4x?x?xf32>
    %265 = stablehlo.divide %259, %264 : tensor<?x4x?x?xf32>
    %266 = call @_where(%arg0, %arg1, %32, %265, %cst_6) : (tensor<i32>, tensor<i32>, tensor<?x?xi1>, tensor<?x4x?x?xf32>, tensor<f32>) -> tensor<?x4x?x?xf32>
    %267 = stablehlo.reduce(%266 init: %cst_5) applies stablehlo.maximum across dimensions = [3] : (tensor<?x4x?x?xf32>, tensor<f32>) -> tensor<?x4x?xf32>
    %268 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %269 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %270 = stablehlo.concatenate %268, %c_9, %269, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %271 = stablehlo.dynamic_broadcast_in_dim %cst_5, %270, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x4x?xf32>
    %272 = stablehlo.maximum %271, %267 : tensor<?x4x?xf32>
    %273 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %274 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %275 = stablehlo.concatenate %273, %c_9, %274, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %276 = stablehlo.dynamic_broadcast_in_dim %272, %275, dims = [0, 1, 2] : (tensor<?x4x?xf32>, tensor<4xi32>) -> tensor<?x4x?x1xf32>
    %277 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %278 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %279 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %280 = stablehlo.concatenate %277, %c_9, %278, %279, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %281 = stablehlo.dynamic_broadcast_in_dim %276, %280, dims = [0, 1, 2, 3] : (tensor<?x4x?x1xf32>, tensor<4xi32>) -> tensor<?x4x?x?xf32>
    %282 = stablehlo.subtract %266, %281 : tensor<?x4x?x?xf32>
    %283 = stablehlo.exponential %282 : tensor<?x4x?x?xf32>
    %284 = stablehlo.reduce(%283 init: %cst_15) applies stablehlo.add across dimensions = [3] : (tensor<?x4x?x?xf32>, tensor<f32>) -> tensor<?x4x?xf32>
    %285 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %286 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %287 = stablehlo.concatenate %285, %c_9, %286, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %288 = stablehlo.dynamic_broadcast_in_dim %284, %287, dims = [0, 1, 2] : (tensor<?x4x?xf32>, tensor<4xi32>) -> tensor<?x4x?x1xf32>
    %289 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %290 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %291 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %292 = stablehlo.concatenate %289, %c_9, %290, %291, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %293 = stablehlo.dynamic_broadcast_in_dim %288, %292, dims = [0, 1, 2, 3] : (tensor<?x4x?x1xf32>, tensor<4xi32>) -> tensor<?x4x?x?xf32>
    %294 = stablehlo.divide %283, %293 : tensor<?x4x?x?xf32>
    %295 = stablehlo.dot_general %294, %257, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2] : (tensor<?x4x?x?xf32>, tensor<?x4x?x32xf32>) -> tensor<?x4x?x32xf32>
    %296 = stablehlo.transpose %295, dims = [0, 2, 1, 3] : (tensor<?x4x?x32xf32>) -> tensor<?x?x4x32xf32>
    %297 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %298 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %299 = stablehlo.concatenate %297, %298, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %300 = stablehlo.dynamic_reshape %296, %299 : (tensor<?x?x4x32xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %301 = stablehlo.dot_general %300, %arg12, contracting_dims = [2] x [0] : (tensor<?x?x128xf32>, tensor<128x128xf32>) -> tensor<?x?x128xf32>
    %302 = stablehlo.add %195, %301 : tensor<?x?x128xf32>
    %303 = stablehlo.multiply %302, %302 : tensor<?x?x128xf32>
    %304 = stablehlo.reduce(%303 init: %cst_15) applies stablehlo.add across dimensions = [2] : (tensor<?x?x128xf32>, tensor<f32>) -> tensor<?x?xf32>
    %305 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %306 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %307 = stablehlo.concatenate %305, %306, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %308 = stablehlo.dynamic_broadcast_in_dim %304, %307, dims = [0, 1] : (tensor<?x?xf32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %309 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %310 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %311 = stablehlo.concatenate %309, %310, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %312 = stablehlo.dynamic_broadcast_in_dim %cst_14, %311, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %313 = stablehlo.divide %308, %312 : tensor<?x?x1xf32>
    %314 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %315 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %316 = stablehlo.concatenate %314, %315, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %317 = stablehlo.dynamic_broadcast_in_dim %cst_13, %316, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %318 = stablehlo.add %313, %317 : tensor<?x?x1xf32>
    %319 = stablehlo.rsqrt %318 : tensor<?x?x1xf32>
    %320 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %321 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %322 = stablehlo.concatenate %320, %321, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %323 = stablehlo.dynamic_broadcast_in_dim %319, %322, dims = [0, 1, 2] : (tensor<?x?x1xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %324 = stablehlo.multiply %302, %323 : tensor<?x?x128xf32>
    %325 = stablehlo.broadcast_in_dim %arg11, dims = [2] : (tensor<128xf32>) -> tensor<1x1x128xf32>
    %326 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %327 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %328 = stablehlo.concatenate %326, %327, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %329 = stablehlo.dynamic_broadcast_in_dim %325, %328, dims = [0, 1, 2] : (tensor<1x1x128xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %330 = stablehlo.multiply %324, %329 : tensor<?x?x128xf32>
    %331 = stablehlo.dot_general %330, %arg14, contracting_dims = [2] x [0] : (tensor<?x?x128xf32>, tensor<128x512xf32>) -> tensor<?x?x512xf32>
    %332 = stablehlo.multiply %331, %331 : tensor<?x?x512xf32>
    %333 = stablehlo.multiply %332, %331 : tensor<?x?x512xf32>
    %334 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %335 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %336 = stablehlo.concatenate %334, %335, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %337 = stablehlo.dynamic_broadcast_in_dim %cst_4, %336, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x512xf32>
    %338 = stablehlo.multiply %337, %333 : tensor<?x?x512xf32>
    %339 = stablehlo.add %331, %338 : tensor<?x?x512xf32>
    %340 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %341 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %342 = stablehlo.concatenate %340, %341, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %343 = stablehlo.dynamic_broadcast_in_dim %cst_2, %342, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x512xf32>
    %344 = stablehlo.multiply %343, %339 : tensor<?x?x512xf32>
    %345 = stablehlo.tanh %344 : tensor<?x?x512xf32>
    %346 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %347 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %348 = stablehlo.concatenate %346, %347, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %349 = stablehlo.dynamic_broadcast_in_dim %cst_1, %348, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x512xf32>
    %350 = stablehlo.add %349, %345 : tensor<?x?x512xf32>
    %351 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %352 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %353 = stablehlo.concatenate %351, %352, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %354 = stablehlo.dynamic_broadcast_in_dim %cst, %353, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x512xf32>
    %355 = stablehlo.multiply %354, %350 : tensor<?x?x512xf32>
    %356 = stablehlo.multiply %331, %355 : tensor<?x?x512xf32>
    %357 = stablehlo.dot_general %356, %arg9, contracting_dims = [2] x [0] : (tensor<?x?x512xf32>, tensor<512x128xf32>) -> tensor<?x?x128xf32>
    %358 = stablehlo.add %302, %357 : tensor<?x?x128xf32>
    %359 = stablehlo.multiply %358, %358 : tensor<?x?x128xf32>
    %360 = stablehlo.reduce(%359 init: %cst_15) applies stablehlo.add across dimensions = [2] : (tensor<?x?x128xf32>, tensor<f32>) -> tensor<?x?xf32>
    %361 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %362 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %363 = stablehlo.concatenate %361, %362, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %364 = stablehlo.dynamic_broadcast_in_dim %360, %363, dims = [0, 1] : (tensor<?x?xf32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %365 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %366 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %367 = stablehlo.concatenate %365, %366, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %368 = stablehlo.dynamic_broadcast_in_dim %cst_14, %367, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %369 = stablehlo.divide %364, %368 : tensor<?x?x1xf32>
    %370 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %371 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %372 = stablehlo.concatenate %370, %371, %c_18, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %373 = stablehlo.dynamic_broadcast_in_dim %cst_13, %372, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x?x1xf32>
    %374 = stablehlo.add %369, %373 : tensor<?x?x1xf32>
    %375 = stablehlo.rsqrt %374 : tensor<?x?x1xf32>
    %376 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %377 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %378 = stablehlo.concatenate %376, %377, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %379 = stablehlo.dynamic_broadcast_in_dim %375, %378, dims = [0, 1, 2] : (tensor<?x?x1xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %380 = stablehlo.multiply %358, %379 : tensor<?x?x128xf32>
    %381 = stablehlo.broadcast_in_dim %arg15, dims = [2] : (tensor<128xf32>) -> tensor<1x1x128xf32>
    %382 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %383 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %384 = stablehlo.concatenate %382, %383, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %385 = stablehlo.dynamic_broadcast_in_dim %381, %384, dims = [0, 1, 2] : (tensor<1x1x128xf32>, tensor<3xi32>) -> tensor<?x?x128xf32>
    %386 = stablehlo.multiply %380, %385 : tensor<?x?x128xf32>
    %387 = stablehlo.transpose %arg2, dims = [1, 0] : (tensor<256x128xf32>) -> tensor<128x256xf32>
    %388 = stablehlo.dot_general %386, %387, contracting_dims = [2] x [0] : (tensor<?x?x128xf32>, tensor<128x256xf32>) -> tensor<?x?x256xf32>
    %389 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %390 = stablehlo.concatenate %c_0, %389, %c_9, %c_17, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %391 = stablehlo.dynamic_broadcast_in_dim %cst_15, %390, dims = [] : (tensor<f32>, tensor<5xi32>) -> tensor<2x?x4x128x32xf32>
    %392 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %393 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %394 = stablehlo.concatenate %c_18, %392, %c_9, %393, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %395 = stablehlo.dynamic_broadcast_in_dim %89, %394, dims = [1, 2, 3, 4] : (tensor<?x4x?x32xf32>, tensor<5xi32>) -> tensor<1x?x4x?x32xf32>
    %396 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %397 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %398 = stablehlo.concatenate %c_18, %396, %c_9, %397, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %399 = stablehlo.dynamic_broadcast_in_dim %252, %398, dims = [1, 2, 3, 4] : (tensor<?x4x?x32xf32>, tensor<5xi32>) -> tensor<1x?x4x?x32xf32>
    %400 = stablehlo.concatenate %395, %399, dim = 0 : (tensor<1x?x4x?x32xf32>, tensor<1x?x4x?x32xf32>) -> tensor<2x?x4x?x32xf32>
    %401 = stablehlo.dynamic_update_slice %391, %400, %c_20, %c_20, %c_20, %c_20, %c_20 : (tensor<2x?x4x128x32xf32>, tensor<2x?x4x?x32xf32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<2x?x4x128x32xf32>
    %402 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %403 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %404 = stablehlo.concatenate %c_18, %402, %c_9, %403, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %405 = stablehlo.dynamic_broadcast_in_dim %94, %404, dims = [1, 2, 3, 4] : (tensor<?x4x?x32xf32>, tensor<5xi32>) -> tensor<1x?x4x?x32xf32>
    %406 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %407 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %408 = stablehlo.concatenate %c_18, %406, %c_9, %407, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %409 = stablehlo.dynamic_broadcast_in_dim %257, %408, dims = [1, 2, 3, 4] : (tensor<?x4x?x32xf32>, tensor<5xi32>) -> tensor<1x?x4x?x32xf32>
    %410 = stablehlo.concatenate %405, %409, dim = 0 : (tensor<1x?x4x?x32xf32>, tensor<1x?x4x?x32xf32>) -> tensor<2x?x4x?x32xf32>
    %411 = stablehlo.dynamic_update_slice %391, %410, %c_20, %c_20, %c_20, %c_20, %c_20 : (tensor<2x?x4x128x32xf32>, tensor<2x?x4x?x32xf32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<2x?x4x128x32xf32>
    %412 = stablehlo.convert %arg1 : tensor<i32>
    %413 = stablehlo.add %412, %c : tensor<i32>
    %414 = stablehlo.convert %413 : tensor<i32>
    %415 = stablehlo.broadcast_in_dim %414, dims = [] : (tensor<i32>) -> tensor<1xi32>
    %416 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %417 = stablehlo.concatenate %416, %c_18, %c_11, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %418 = "stablehlo.dynamic_gather"(%388, %415, %417) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 1], collapsed_slice_dims = [1], start_index_map = [1]>, indices_are_sorted = true}> : (tensor<?x?x256xf32>, tensor<1xi32>, tensor<3xi32>) -> tensor<?x256xf32>
    %419 = stablehlo.convert %arg1 : tensor<i32>
    %420 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %421 = stablehlo.dynamic_broadcast_in_dim %419, %420, dims = [] : (tensor<i32>, tensor<1xi32>) -> tensor<?xi32>
    return %418, %401, %421, %411 : tensor<?x256xf32>, tensor<2x?x4x128x32xf32>, tensor<?xi32>, tensor<2x?x4x128x32xf32>
  }
  func.func private @tril(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<i32> {jax.global_constant = "s"}, %arg2: tensor<?x?xi1>) -> tensor<?x?xi1> {
    %c = stablehlo.constant dense<false> : tensor<i1>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %1 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %2 = stablehlo.concatenate %0, %1, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %3 = stablehlo.dynamic_iota %2, dim = 0 : (tensor<2xi32>) -> tensor<?x?xi32>
    %4 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %5 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %6 = stablehlo.concatenate %4, %5, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %7 = stablehlo.dynamic_broadcast_in_dim %c_0, %6, dims = [] : (tensor<i32>, tensor<2xi32>) -> tensor<?x?xi32>
    %8 = stablehlo.add %3, %7 : tensor<?x?xi32>
    %9 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %10 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %11 = stablehlo.concatenate %9, %10, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %12 = stablehlo.dynamic_iota %11, dim = 1 : (tensor<2xi32>) -> tensor<?x?xi32>
    %13 = stablehlo.compare GE, %8, %12, SIGNED : (tensor<?x?xi32>, tensor<?x?xi32>) -> tensor<?x?xi1>
    %14 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %15 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %16 = stablehlo.concatenate %14, %15, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %17 = stablehlo.dynamic_broadcast_in_dim %c, %16, dims = [] : (tensor<i1>, tensor<2xi32>) -> tensor<?x?xi1>
    %18 = stablehlo.select %13, %arg2, %17 : tensor<?x?xi1>, tensor<?x?xi1>
    return %18 : tensor<?x?xi1>
  }
  func.func private @_where(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<i32> {jax.global_constant = "s"}, %arg2: tensor<?x?xi1>, %arg3: tensor<?x4x?x?xf32>, %arg4: tensor<f32>) -> tensor<?x4x?x?xf32> {
    %c = stablehlo.constant dense<4> : tensor<1xi32>
    %0 = stablehlo.convert %arg4 : tensor<f32>
    %1 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %2 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %3 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %4 = stablehlo.concatenate %1, %c, %2, %3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %5 = stablehlo.dynamic_broadcast_in_dim %arg2, %4, dims = [2, 3] : (tensor<?x?xi1>, tensor<4xi32>) -> tensor<?x4x?x?xi1>
    %6 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %7 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %8 = stablehlo.reshape %arg1 : (tensor<i32>) -> tensor<1xi32>
    %9 = stablehlo.concatenate %6, %c, %7, %8, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %10 = stablehlo.dynamic_broadcast_in_dim %0, %9, dims = [] : (tensor<f32>, tensor<4xi32>) -> tensor<?x4x?x?xf32>
    %11 = stablehlo.select %5, %arg3, %10 : tensor<?x4x?x?xi1>, tensor<?x4x?x?xf32>
    return %11 : tensor<?x4x?x?xf32>
  }
}
