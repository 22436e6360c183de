module @jit_flat_fn attributes {jax.uses_shape_polymorphism = true, mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<256x128xf32>, %arg1: tensor<512x128xf32>, %arg2: tensor<128xf32>, %arg3: tensor<128xf32>, %arg4: tensor<128x128xf32>, %arg5: tensor<128x384xf32>, %arg6: tensor<128x512xf32>, %arg7: tensor<512x128xf32>, %arg8: tensor<128xf32>, %arg9: tensor<128xf32>, %arg10: tensor<128x128xf32>, %arg11: tensor<128x384xf32>, %arg12: tensor<128x512xf32>, %arg13: tensor<128xf32>, %arg14: tensor<128x128xf32>, %arg15: tensor<2x?x4x128x32xf32>, %arg16: tensor<?xi32>, %arg17: tensor<2x?x4x128x32xf32>, %arg18: tensor<?xi32>) -> (tensor<?x256xf32> {jax.result_info = "result[0]"}, tensor<2x?x4x128x32xf32> {jax.result_info = "result[1]['k']"}, tensor<?xi32> {jax.result_info = "result[1]['pos']"}, tensor<2x?x4x128x32xf32> {jax.result_info = "result[1]['v']"}) {
    %c = stablehlo.constant dense<1> : tensor<i32>
    %0 = stablehlo.get_dimension_size %arg15, dim = 1 : (tensor<2x?x4x128x32xf32>) -> tensor<i32>
    %1 = stablehlo.get_dimension_size %arg16, dim = 0 : (tensor<?xi32>) -> tensor<i32>
    %2 = stablehlo.get_dimension_size %arg17, dim = 1 : (tensor<2x?x4x128x32xf32>) -> tensor<i32>
    %3 = stablehlo.get_dimension_size %arg18, dim = 0 : (tensor<?xi32>) -> tensor<i32>
    %4 = stablehlo.compare GE, %0, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%4, %0) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Expected value >= 1 for dimension variable 'b'. Using the following polymorphic shapes specifications: args[15].shape = (2, b, 4, 128, 32),args[16].shape = (b,),args[17].shape = (2, b, 4, 128, 32),args[18].shape = (b,). Obtained dimension variables: 'b' = {0} from specification 'b' for dimension args[15].shape[1] (= {0}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>) -> ()
    %5 = stablehlo.compare EQ, %1, %0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%5, %1, %0) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Found inconsistency between dimension size args[16].shape[0] (= {0}) and the specification 'b' (= {1}). Using the following polymorphic shapes specifications: args[15].shape = (2, b, 4, 128, 32),args[16].shape = (b,),args[17].shape = (2, b, 4, 128, 32),args[18].shape = (b,). Obtained dimension variables: 'b' = {1} from specification 'b' for dimension args[15].shape[1] (= {1}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>, tensor<i32>) -> ()
    %6 = stablehlo.compare EQ, %2, %0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%6, %2, %0) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Found inconsistency between dimension size args[17].shape[1] (= {0}) and the specification 'b' (= {1}). Using the following polymorphic shapes specifications: args[15].shape = (2, b, 4, 128, 32),args[16].shape = (b,),args[17].shape = (2, b, 4, 128, 32),args[18].shape = (b,). Obtained dimension variables: 'b' = {1} from specification 'b' for dimension args[15].shape[1] (= {1}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>, tensor<i32>) -> ()
    %7 = stablehlo.compare EQ, %3, %0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%7, %3, %0) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Found inconsistency between dimension size args[18].shape[0] (= {0}) and the specification 'b' (= {1}). Using the following polymorphic shapes specifications: args[15].shape = (2, b, 4, 128, 32),args[16].shape = (b,),args[17].shape = (2, b, 4, 128, 32),args[18].shape = (b,). Obtained dimension variables: 'b' = {1} from specification 'b' for dimension args[15].shape[1] (= {1}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>, tensor<i32>) -> ()
    %8:4 = call @_wrapped_jax_export_main(%0, %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8, %arg9, %arg10, %arg11, %arg12, %arg13, %arg14, %arg15, %arg16, %arg17, %arg18) : (tensor<i32>, tensor<256x128xf32>, tensor<512x128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>, tensor<128x384xf32>, tensor<128x512xf32>, tensor<512x128xf32>, tensor<128xf32>, tensor<128xf32>, tensor<128x128xf32>, tensor<128x384xf32>, tensor<128x512xf32>, tensor<128xf32>, tensor<128x128xf32>, tensor<2x?x4x128x32xf32>, tensor<?xi32>, tensor<2x?x4x128x32xf32>, tensor<?xi32>) -> (tensor<?x256xf32>, tensor<2x?x4x128x32xf32>, tensor<?xi32>, tensor<2x?x4x128x32xf32>)
    return %8#0, %8#1, %8#2, %8#3 : tensor<?x256xf32>, tensor<2x?x4x128x32xf32>, tensor<?xi32>, tensor<2x?x4x128x32xf32>
  }
  func.func private @_wrapped_jax_export_main(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<256x128xf32>, %arg2: tensor<512x128xf32>, %arg3: tensor<128xf32>, %arg4: tensor<128xf32>, %arg5: tensor<128x128xf32>, %arg6: tensor<128x384xf32>, %arg7: tensor<128x512xf32>, %arg8: tensor<512x128xf32>, %arg9: tensor<128xf32>, %arg10: tensor<128xf32>, %arg11: tensor<128x128xf32>, %arg12: tensor<128x384xf32>, %arg13: tensor<128x512xf32>, %arg14: tensor<128xf32>, %arg15: tensor<128x128xf32>, %arg16: tensor<2x?x4x128x32xf32>, %arg17: tensor<?xi32>, %arg18: tensor<2x?x4x128x32xf32>, %arg19: tensor<?xi32>) -> (tensor<?x256xf32> {jax.result_info = "result[0]"}, tensor<2x?x4x128x32xf32> {jax.result_info = "result[1]['k']"}, tensor<?xi32> {jax.result_info = "result[1]['pos']"}, tensor<2x?x4x128x32xf32> {jax.result_info = "result[1]['v']"}) {
    %cst = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_1 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %c = stablehlo.constant dense<512> : tensor<1xi32>
    %cst_2 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %cst_3 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %cst_4 = stablehlo.constant dense<-1.000000e+09> : tensor<f32>
    %cst_5 = stablehlo.constant dense<5.65685415> : tensor<f32>
    %c_6 = stablehlo.constant dense<32> : tensor<1xi32>
    %c_7 = stablehlo.constant dense<4> : tensor<1xi32>
    %c_8 = stablehlo.constant dense<384> : tensor<1xi32>
    %c_9 = stablehlo.constant dense<256> : tensor<1xi32>
    %c_10 = stablehlo.constant dense<0> : tensor<1xi32>
    %cst_11 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %cst_12 = stablehlo.constant dense<1.280000e+02> : tensor<f32>
    %cst_13 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %c_14 = stablehlo.constant dense<128> : tensor<1xi32>
    %c_15 = stablehlo.constant dense<128> : tensor<i32>
    %c_16 = stablehlo.constant dense<127> : tensor<i32>
    %c_17 = stablehlo.constant dense<1> : tensor<1xi32>
    %c_18 = stablehlo.constant dense<1> : tensor<i32>
    %c_19 = stablehlo.constant dense<256> : tensor<i32>
    %c_20 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %1 = stablehlo.dynamic_broadcast_in_dim %c_20, %0, dims = [] : (tensor<i32>, tensor<1xi32>) -> tensor<?xi32>
    %2 = stablehlo.compare LT, %arg19, %1, SIGNED : (tensor<?xi32>, tensor<?xi32>) -> tensor<?xi1>
    %3 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %4 = stablehlo.dynamic_broadcast_in_dim %c_19, %3, dims = [] : (tensor<i32>, tensor<1xi32>) -> tensor<?xi32>
    %5 = stablehlo.add %arg19, %4 : tensor<?xi32>
    %6 = stablehlo.select %2, %5, %arg19 : tensor<?xi1>, tensor<?xi32>
    %7 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %8 = stablehlo.concatenate %7, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %9 = stablehlo.dynamic_broadcast_in_dim %6, %8, dims = [0] : (tensor<?xi32>, tensor<2xi32>) -> tensor<?x1xi32>
    %10 = "stablehlo.gather"(%arg1, %9) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 128>}> : (tensor<256x128xf32>, tensor<?x1xi32>) -> tensor<?x128xf32>
    %11 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %12 = stablehlo.dynamic_broadcast_in_dim %c_16, %11, dims = [] : (tensor<i32>, tensor<1xi32>) -> tensor<?xi32>
    %13 = stablehlo.minimum %arg17, %12 : tensor<?xi32>
    %14 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %15 = stablehlo.dynamic_broadcast_in_dim %c_20, %14, dims = [] : (tensor<i32>, tensor<1xi32>) -> tensor<?xi32>
    %16 = stablehlo.compare LT, %13, %15, SIGNED : (tensor<?xi32>, tensor<?xi32>) -> tensor<?xi1>
    %17 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %18 = stablehlo.dynamic_broadcast_in_dim %c_15, %17, dims = [] : (tensor<i32>, tensor<1xi32>) -> tensor<?xi32>
    %19 = stablehlo.add %13, %18 : tensor<?xi32>
    %20 = stablehlo.select %16, %19, %13 : tensor<?xi1>, tensor<?xi32>
    %21 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %22 = stablehlo.concatenate %21, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %23 = stablehlo.dynamic_broadcast_in_dim %20, %22, dims = [0] : (tensor<?xi32>, tensor<2xi32>) -> tensor<?x1xi32>
    %24 = "stablehlo.gather"(%arg15, %23) <{dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 128>}> : (tensor<128x128xf32>, tensor<?x1xi32>) -> tensor<?x128xf32>
    %25 = stablehlo.add %10, %24 : tensor<?x128xf32>
    %26 = stablehlo.iota dim = 0 : tensor<128xi32>
    %27 = stablehlo.broadcast_in_dim %26, dims = [1] : (tensor<128xi32>) -> tensor<1x128xi32>
    %28 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %29 = stablehlo.concatenate %28, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %30 = stablehlo.dynamic_broadcast_in_dim %arg17, %29, dims = [0] : (tensor<?xi32>, tensor<2xi32>) -> tensor<?x1xi32>
    %31 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %32 = stablehlo.concatenate %31, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %33 = stablehlo.dynamic_broadcast_in_dim %27, %32, dims = [0, 1] : (tensor<1x128xi32>, tensor<2xi32>) -> tensor<?x128xi32>
    %34 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %35 = stablehlo.concatenate %34, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %36 = stablehlo.dynamic_broadcast_in_dim %30, %35, dims = [0, 1] : (tensor<?x1xi32>, tensor<2xi32>) -> tensor<?x128xi32>
    %37 = stablehlo.compare EQ, %33, %36, SIGNED : (tensor<?x128xi32>, tensor<?x128xi32>) -> tensor<?x128xi1>
    %38 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %39 = stablehlo.concatenate %38, %c_17, %c_14, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %40 = stablehlo.dynamic_broadcast_in_dim %37, %39, dims = [0, 2] : (tensor<?x128xi1>, tensor<4xi32>) -> tensor<?x1x128x1xi1>
    %41 = stablehlo.broadcast_in_dim %26, dims = [1] : (tensor<128xi32>) -> tensor<1x128xi32>
    %42 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %43 = stablehlo.concatenate %42, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %44 = stablehlo.dynamic_broadcast_in_dim %arg17, %43, dims = [0] : (tensor<?xi32>, tensor<2xi32>) -> tensor<?x1xi32>
    %45 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %46 = stablehlo.concatenate %45, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %47 = stablehlo.dynamic_broadcast_in_dim %41, %46, dims = [0, 1] : (tensor<1x128xi32>, tensor<2xi32>) -> tensor<?x128xi32>
    %48 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %49 = stablehlo.concatenate %48, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %50 = stablehlo.dynamic_broadcast_in_dim %44, %49, dims = [0, 1] : (tensor<?x1xi32>, tensor<2xi32>) -> tensor<?x128xi32>
    %51 = stablehlo.compare LE, %47, %50, SIGNED : (tensor<?x128xi32>, tensor<?x128xi32>) -> tensor<?x128xi1>
    %52 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %53 = stablehlo.concatenate %52, %c_17, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %54 = stablehlo.dynamic_broadcast_in_dim %51, %53, dims = [0, 2] : (tensor<?x128xi1>, tensor<3xi32>) -> tensor<?x1x128xi1>
    %55 = stablehlo.multiply %25, %25 : tensor<?x128xf32>
    %56 = stablehlo.reduce(%55 init: %cst_13) applies stablehlo.add across dimensions = [1] : (tensor<?x128xf32>, tensor<f32>) -> tensor<?xf32>
    %57 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %58 = stablehlo.concatenate %57, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %59 = stablehlo.dynamic_broadcast_in_dim %56, %58, dims = [0] : (tensor<?xf32>, tensor<2xi32>) -> tensor<?x1xf32>
    %60 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %61 = stablehlo.concatenate %60, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %62 = stablehlo.dynamic_broadcast_in_dim %cst_12, %61, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %63 = stablehlo.divide %59, %62 : tensor<?x1xf32>
    %64 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %65 = stablehlo.concatenate %64, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %66 = stablehlo.dynamic_broadcast_in_dim %cst_11, %65, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %67 = stablehlo.add %63, %66 : tensor<?x1xf32>
    %68 = stablehlo.rsqrt %67 : tensor<?x1xf32>
    %69 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %70 = stablehlo.concatenate %69, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %71 = stablehlo.dynamic_broadcast_in_dim %68, %70, dims = [0, 1] : (tensor<?x1xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %72 = stablehlo.multiply %25, %71 : tensor<?x128xf32>
    %73 = stablehlo.broadcast_in_dim %arg3, dims = [1] : (tensor<128xf32>) -> tensor<1x128xf32>
    %74 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %75 = stablehlo.concatenate %74, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %76 = stablehlo.dynamic_broadcast_in_dim %73, %75, dims = [0, 1] : (tensor<1x128xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %77 = stablehlo.multiply %72, %76 : tensor<?x128xf32>
    %78 = stablehlo.dot_general %77, %arg6, contracting_dims = [1] x [0] : (tensor<?x128xf32>, tensor<128x384xf32>) -> tensor<?x384xf32>
    %79 = stablehlo.concatenate %c_10, %c_10, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %80 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %81 = stablehlo.concatenate %80, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %82 = stablehlo.concatenate %c_17, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %83 = stablehlo.real_dynamic_slice %78, %79, %81, %82 : (tensor<?x384xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x128xf32>
    %84 = stablehlo.concatenate %c_10, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %85 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %86 = stablehlo.concatenate %85, %c_9, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %87 = stablehlo.concatenate %c_17, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %88 = stablehlo.real_dynamic_slice %78, %84, %86, %87 : (tensor<?x384xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x128xf32>
    %89 = stablehlo.concatenate %c_10, %c_9, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %90 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %91 = stablehlo.concatenate %90, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %92 = stablehlo.concatenate %c_17, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %93 = stablehlo.real_dynamic_slice %78, %89, %91, %92 : (tensor<?x384xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x128xf32>
    %94 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %95 = stablehlo.concatenate %94, %c_7, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %96 = stablehlo.dynamic_reshape %83, %95 : (tensor<?x128xf32>, tensor<3xi32>) -> tensor<?x4x32xf32>
    %97 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %98 = stablehlo.concatenate %97, %c_7, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %99 = stablehlo.dynamic_reshape %88, %98 : (tensor<?x128xf32>, tensor<3xi32>) -> tensor<?x4x32xf32>
    %100 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %101 = stablehlo.concatenate %100, %c_7, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %102 = stablehlo.dynamic_reshape %93, %101 : (tensor<?x128xf32>, tensor<3xi32>) -> tensor<?x4x32xf32>
    %103 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %104 = stablehlo.concatenate %103, %c_7, %c_17, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %105 = stablehlo.dynamic_broadcast_in_dim %99, %104, dims = [0, 1, 3] : (tensor<?x4x32xf32>, tensor<4xi32>) -> tensor<?x4x1x32xf32>
    %106 = stablehlo.broadcast_in_dim %c_20, dims = [] : (tensor<i32>) -> tensor<1xi32>
    %107 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %108 = stablehlo.concatenate %c_17, %107, %c_7, %c_14, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %109 = "stablehlo.dynamic_gather"(%arg16, %106, %108) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 1, 2, 3], collapsed_slice_dims = [0], start_index_map = [0]>, indices_are_sorted = true}> : (tensor<2x?x4x128x32xf32>, tensor<1xi32>, tensor<5xi32>) -> tensor<?x4x128x32xf32>
    %110 = call @_where(%arg0, %40, %105, %109) : (tensor<i32>, tensor<?x1x128x1xi1>, tensor<?x4x1x32xf32>, tensor<?x4x128x32xf32>) -> tensor<?x4x128x32xf32>
    %111 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %112 = stablehlo.concatenate %111, %c_7, %c_17, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %113 = stablehlo.dynamic_broadcast_in_dim %102, %112, dims = [0, 1, 3] : (tensor<?x4x32xf32>, tensor<4xi32>) -> tensor<?x4x1x32xf32>
    %114 = stablehlo.broadcast_in_dim %c_20, dims = [] : (tensor<i32>) -> tensor<1xi32>
    %115 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %116 = stablehlo.concatenate %c_17, %115, %c_7, %c_14, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %117 = "stablehlo.dynamic_gather"(%arg18, %114, %116) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 1, 2, 3], collapsed_slice_dims = [0], start_index_map = [0]>, indices_are_sorted = true}> : (tensor<2x?x4x128x32xf32>, tensor<1xi32>, tensor<5xi32>) -> tensor<?x4x128x32xf32>
    %118 = call @_where(%arg0, %40, %113, %117) : (tensor<i32>, tensor<?x1x128x1xi1>, tensor<?x4x1x32xf32>, tensor<?x4x128x32xf32>) -> tensor<?x4x128x32xf32>
    %119 = stablehlo.dot_general %96, %110, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [3] : (tensor<?x4x32xf32>, tensor<?x4x128x32xf32>) -> tensor<?x4x128xf32>
    %120 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %121 = stablehlo.concatenate %120, %c_7, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %122 = stablehlo.dynamic_broadcast_in_dim %cst_5, %121, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x4x128xf32>
    %123 = stablehlo.divide %119, %122 : tensor<?x4x128xf32>
    %124 = call @_where_0(%arg0, %54, %123, %cst_4) : (tensor<i32>, tensor<?x1x128xi1>, tensor<?x4x128xf32>, tensor<f32>) -> tensor<?x4x128xf32>
    %125 = stablehlo.reduce(%124 init: %cst_3) applies stablehlo.maximum across dimensions = [2] : (tensor<?x4x128xf32>, tensor<f32>) -> tensor<?x4xf32>
    %126 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %127 = stablehlo.concatenate %126, %c_7, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %128 = stablehlo.dynamic_broadcast_in_dim %cst_3, %127, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x4xf32>
    %129 = stablehlo.maximum %128, %125 : tensor<?x4xf32>
    %130 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %131 = stablehlo.concatenate %130, %c_7, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %132 = stablehlo.dynamic_broadcast_in_dim %129, %131, dims = [0, 1] : (tensor<?x4xf32>, tensor<3xi32>) -> tensor<?x4x1xf32>
    %133 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %134 = stablehlo.concatenate %133, %c_7, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %135 = stablehlo.dynamic_broadcast_in_dim %132, %134, dims = [0, 1, 2] : (tensor<?x4x1xf32>, tensor<3xi32>) -> tensor<?x4x128xf32>
    %136 = stablehlo.subtract %124, %135 : tensor<?x4x128xf32>
    %137 = stablehlo.exponential %136 : tensor<?x4x128xf32>
    %138 = stablehlo.reduce(%137 init: %cst_13) applies stablehlo.add across dimensions = [2] : (tensor<?x4x128xf32>, tensor<f32>) -> tensor<?x4xf32>
    %139 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %140 = stablehlo.concatenate %139, %c_7, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %141 = stablehlo.dynamic_broadcast_in_dim %138, %140, dims = [0, 1] : (tensor<?x4xf32>, tensor<3xi32>) -> tensor<?x4x1xf32>
    %142 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %143 = stablehlo.concatenate %142, %c_7, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %144 = stablehlo.dynamic_broadcast_in_dim %141, %143, dims = [0, 1, 2] : (tensor<?x4x1xf32>, tensor<3xi32>) -> tensor<?x4x128xf32>
    %145 = stablehlo.divide %137, %144 : tensor<?x4x128xf32>
    %146 = stablehlo.dot_general %145, %118, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2] : (tensor<?x4x128xf32>, tensor<?x4x128x32xf32>) -> tensor<?x4x32xf32>
    %147 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %148 = stablehlo.concatenate %147, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %149 = stablehlo.dynamic_reshape %146, %148 : (tensor<?x4x32xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %150 = stablehlo.dot_general %149, %arg5, contracting_dims = [1] x [0] : (tensor<?x128xf32>, tensor<128x128xf32>) -> tensor<?x128xf32>
    %151 = stablehlo.add %25, %150 : tensor<?x128xf32>
    %152 = stablehlo.multiply %151, %151 : tensor<?x128xf32>
    %153 = stablehlo.reduce(%152 init: %cst_13) applies stablehlo.add across dimensions = [1] : (tensor<?x128xf32>, tensor<f32>) -> tensor<?xf32>
    %154 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %155 = stablehlo.concatenate %154, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %156 = stablehlo.dynamic_broadcast_in_dim %153, %155, dims = [0] : (tensor<?xf32>, tensor<2xi32>) -> tensor<?x1xf32>
    %157 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %158 = stablehlo.concatenate %157, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %159 = stablehlo.dynamic_broadcast_in_dim %cst_12, %158, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %160 = stablehlo.divide %156, %159 : tensor<?x1xf32>
    %161 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %162 = stablehlo.concatenate %161, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %163 = stablehlo.dynamic_broadcast_in_dim %cst_11, %162, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %164 = stablehlo.add %160, %163 : tensor<?x1xf32>
    %165 = stablehlo.rsqrt %164 : tensor<?x1xf32>
    %166 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %167 = stablehlo.concatenate %166, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %168 = stablehlo.dynamic_broadcast_in_dim %165, %167, dims = [0, 1] : (tensor<?x1xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %169 = stablehlo.multiply %151, %168 : tensor<?x128xf32>
    %170 = stablehlo.broadcast_in_dim %arg4, dims = [1] : (tensor<128xf32>) -> tensor<1x128xf32>
    %171 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %172 = stablehlo.concatenate %171, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %173 = stablehlo.dynamic_broadcast_in_dim %170, %172, dims = [0, 1] : (tensor<1x128xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %174 = stablehlo.multiply %169, %173 : tensor<?x128xf32>
    %175 = stablehlo.dot_general %174, %arg7, contracting_dims = [1] x [0] : (tensor<?x128xf32>, tensor<128x512xf32>) -> tensor<?x512xf32>
    %176 = stablehlo.multiply %175, %175 : tensor<?x512xf32>
    %177 = stablehlo.multiply %176, %175 : tensor<?x512xf32>
    %178 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %179 = stablehlo.concatenate %178, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %180 = stablehlo.dynamic_broadcast_in_dim %cst_2, %179, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x512xf32>
    %181 = stablehlo.multiply %180, %177 : tensor<?x512xf32>
    %182 = stablehlo.add %175, %181 : tensor<?x512xf32>
    %183 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %184 = stablehlo.concatenate %183, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %185 = stablehlo.dynamic_broadcast_in_dim %cst_1, %184, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x512xf32>
    %186 = stablehlo.multiply %185, %182 : tensor<?x512xf32>
    %187 = stablehlo.tanh %186 : tensor<?x512xf32>
    %188 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %189 = stablehlo.concatenate %188, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %190 = stablehlo.dynamic_broadcast_in_dim %cst_0, %189, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x512xf32>
    %191 = stablehlo.add %190, %187 : tensor<?x512xf32>
    %192 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %193 = stablehlo.concatenate %192, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %194 = stablehlo.dynamic_broadcast_in_dim %cst, %193, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x512xf32>
    %195 = stablehlo.multiply %194, %191 : tensor<?x512xf32>
    %196 = stablehlo.multiply %175, %195 : tensor<?x512xf32>
    %197 = stablehlo.dot_general %196, %arg2, contracting_dims = [1] x [0] : (tensor<?x512xf32>, tensor<512x128xf32>) -> tensor<?x128xf32>
    %198 = stablehlo.add %151, %197 : tensor<?x128xf32>
    %199 = stablehlo.multiply %198, %198 : tensor<?x128xf32>
    %200 = stablehlo.reduce(%199 init: %cst_13) applies stablehlo.add across dimensions = [1] : (tensor<?x128xf32>, tensor<f32>) -> tensor<?xf32>
    %201 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %202 = stablehlo.concatenate %201, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %203 = stablehlo.dynamic_broadcast_in_dim %200, %202, dims = [0] : (tensor<?xf32>, tensor<2xi32>) -> tensor<?x1xf32>
    %204 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %205 = stablehlo.concatenate %204, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %206 = stablehlo.dynamic_broadcast_in_dim %cst_12, %205, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %207 = stablehlo.divide %203, %206 : tensor<?x1xf32>
    %208 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %209 = stablehlo.concatenate %208, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %210 = stablehlo.dynamic_broadcast_in_dim %cst_11, %209, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %211 = stablehlo.add %207, %210 : tensor<?x1xf32>
    %212 = stablehlo.rsqrt %211 : tensor<?x1xf32>
    %213 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %214 = stablehlo.concatenate %213, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %215 = stablehlo.dynamic_broadcast_in_dim %212, %214, dims = [0, 1] : (tensor<?x1xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %216 = stablehlo.multiply %198, %215 : tensor<?x128xf32>
    %217 = stablehlo.broadcast_in_dim %arg9, dims = [1] : (tensor<128xf32>) -> tensor<1x128xf32>
    %218 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %219 = stablehlo.concatenate %218, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %220 = stablehlo.dynamic_broadcast_in_dim %217, %219, dims = [0, 1] : (tensor<1x128xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %221 = stablehlo.multiply %216, %220 : tensor<?x128xf32>
    %222 = stablehlo.dot_general %221, %arg12, contracting_dims = [1] x [0] : (tensor<?x128xf32>, tensor<128x384xf32>) -> tensor<?x384xf32>
    %223 = stablehlo.concatenate %c_10, %c_10, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %224 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %225 = stablehlo.concatenate %224, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %226 = stablehlo.concatenate %c_17, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %227 = stablehlo.real_dynamic_slice %222, %223, %225, %226 : (tensor<?x384xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x128xf32>
    %228 = stablehlo.concatenate %c_10, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %229 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %230 = stablehlo.concatenate %229, %c_9, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %231 = stablehlo.concatenate %c_17, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %232 = stablehlo.real_dynamic_slice %222, %228, %230, %231 : (tensor<?x384xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x128xf32>
    %233 = stablehlo.concatenate %c_10, %c_9, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %234 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %235 = stablehlo.concatenate %234, %c_8, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %236 = stablehlo.concatenate %c_17, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %237 = stablehlo.real_dynamic_slice %222, %233, %235, %236 : (tensor<?x384xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x128xf32>
    %238 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %239 = stablehlo.concatenate %238, %c_7, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %240 = stablehlo.dynamic_reshape %227, %239 : (tensor<?x128xf32>, tensor<3xi32>) -> tensor<?x4x32xf32>
    %241 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %242 = stablehlo.concatenate %241, %c_7, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %243 = stablehlo.dynamic_reshape %232, %242 : (tensor<?x128xf32>, tensor<3xi32>) -> tensor<?x4x32xf32>
    %244 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %245 = stablehlo.concatenate %244, %c_7, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %246 = stablehlo.dynamic_reshape %237, %245 : (tensor<?x128xf32>, tensor<3xi32>) -> tensor<?x4x32xf32>
    %247 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %248 = stablehlo.concatenate %247, %c_7, %c_17, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %249 = stablehlo.dynamic_broadcast_in_dim %243, %248, dims = [0, 1, 3] : (tensor<?x4x32xf32>, tensor<4xi32>) -> tensor<?x4x1x32xf32>
    %250 = stablehlo.broadcast_in_dim %c_18, dims = [] : (tensor<i32>) -> tensor<1xi32>
    %251 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %252 = stablehlo.concatenate %c_17, %251, %c_7, %c_14, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %253 = "stablehlo.dynamic_gather"(%arg16, %250, %252) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 1, 2, 3], collapsed_slice_dims = [0], start_index_map = [0]>, indices_are_sorted = true}> : (tensor<2x?x4x128x32xf32>, tensor<1xi32>, tensor<5xi32>) -> tensor<?x4x128x32xf32>
    %254 = call @_where(%arg0, %40, %249, %253) : (tensor<i32>, tensor<?x1x128x1xi1>, tensor<?x4x1x32xf32>, tensor<?x4x128x32xf32>) -> tensor<?x4x128x32xf32>
    %255 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %256 = stablehlo.concatenate %255, %c_7, %c_17, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %257 = stablehlo.dynamic_broadcast_in_dim %246, %256, dims = [0, 1, 3] : (tensor<?x4x32xf32>, tensor<4xi32>) -> tensor<?x4x1x32xf32>
    %258 = stablehlo.broadcast_in_dim %c_18, dims = [] : (tensor<i32>) -> tensor<1xi32>
    %259 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %260 = stablehlo.concatenate %c_17, %259, %c_7, %c_14, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %261 = "stablehlo.dynamic_gather"(%arg18, %258, %260) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 1, 2, 3], collapsed_slice_dims = [0], start_index_map = [0]>, indices_are_sorted = true}> : (tensor<2x?x4x128x32xf32>, tensor<1xi32>, tensor<5xi32>) -> tensor<?x4x128x32xf32>
    %262 = call @_where(%arg0, %40, %257, %261) : (tensor<i32>, tensor<?x1x128x1xi1>, tensor<?x4x1x32xf32>, tensor<?x4x128x32xf32>) -> tensor<?x4x128x32xf32>
    %263 = stablehlo.dot_general %240, %254, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [3] : (tensor<?x4x32xf32>, tensor<?x4x128x32xf32>) -> tensor<?x4x128xf32>
    %264 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %265 = stablehlo.concatenate %264, %c_7, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %266 = stablehlo.dynamic_broadcast_in_dim %cst_5, %265, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x4x128xf32>
    %267 = stablehlo.divide %263, %266 : tensor<?x4x128xf32>
    %268 = call @_where_0(%arg0, %54, %267, %cst_4) : (tensor<i32>, tensor<?x1x128xi1>, tensor<?x4x128xf32>, tensor<f32>) -> tensor<?x4x128xf32>
    %269 = stablehlo.reduce(%268 init: %cst_3) applies stablehlo.maximum across dimensions = [2] : (tensor<?x4x128xf32>, tensor<f32>) -> tensor<?x4xf32>
    %270 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %271 = stablehlo.concatenate %270, %c_7, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %272 = stablehlo.dynamic_broadcast_in_dim %cst_3, %271, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x4xf32>
    %273 = stablehlo.maximum %272, %269 : tensor<?x4xf32>
    %274 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %275 = stablehlo.concatenate %274, %c_7, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %276 = stablehlo.dynamic_broadcast_in_dim %273, %275, dims = [0, 1] : (tensor<?x4xf32>, tensor<3xi32>) -> tensor<?x4x1xf32>
    %277 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %278 = stablehlo.concatenate %277, %c_7, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %279 = stablehlo.dynamic_broadcast_in_dim %276, %278, dims = [0, 1, 2] : (tensor<?x4x1xf32>, tensor<3xi32>) -> tensor<?x4x128xf32>
    %280 = stablehlo.subtract %268, %279 : tensor<?x4x128xf32>
    %281 = stablehlo.exponential %280 : tensor<?x4x128xf32>
    %282 = stablehlo.reduce(%281 init: %cst_13) applies stablehlo.add across dimensions = [2] : (tensor<?x4x128xf32>, tensor<f32>) -> tensor<?x4xf32>
    %283 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %284 = stablehlo.concatenate %283, %c_7, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %285 = stablehlo.dynamic_broadcast_in_dim %282, %284, dims = [0, 1] : (tensor<?x4xf32>, tensor<3xi32>) -> tensor<?x4x1xf32>
    %286 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %287 = stablehlo.concatenate %286, %c_7, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %288 = stablehlo.dynamic_broadcast_in_dim %285, %287, dims = [0, 1, 2] : (tensor<?x4x1xf32>, tensor<3xi32>) -> tensor<?x4x128xf32>
    %289 = stablehlo.divide %281, %288 : tensor<?x4x128xf32>
    %290 = stablehlo.dot_general %289, %262, batching_dims = [0, 1] x [0, 1], contracting_dims = [2] x [2] : (tensor<?x4x128xf32>, tensor<?x4x128x32xf32>) -> tensor<?x4x32xf32>
    %291 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %292 = stablehlo.concatenate %291, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %293 = stablehlo.dynamic_reshape %290, %292 : (tensor<?x4x32xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %294 = stablehlo.dot_general %293, %arg11, contracting_dims = [1] x [0] : (tensor<?x128xf32>, tensor<128x128xf32>) -> tensor<?x128xf32>
    %295 = stablehlo.add %198, %294 : tensor<?x128xf32>
    %296 = stablehlo.multiply %295, %295 : tensor<?x128xf32>
    %297 = stablehlo.reduce(%296 init: %cst_13) applies stablehlo.add across dimensions = [1] : (tensor<?x128xf32>, tensor<f32>) -> tensor<?xf32>
    %298 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %299 = stablehlo.concatenate %298, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %300 = stablehlo.dynamic_broadcast_in_dim %297, %299, dims = [0] : (tensor<?xf32>, tensor<2xi32>) -> tensor<?x1xf32>
    %301 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %302 = stablehlo.concatenate %301, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %303 = stablehlo.dynamic_broadcast_in_dim %cst_12, %302, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %304 = stablehlo.divide %300, %303 : tensor<?x1xf32>
    %305 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %306 = stablehlo.concatenate %305, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %307 = stablehlo.dynamic_broadcast_in_dim %cst_11, %306, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %308 = stablehlo.add %304, %307 : tensor<?x1xf32>
    %309 = stablehlo.rsqrt %308 : tensor<?x1xf32>
    %310 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %311 = stablehlo.concatenate %310, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %312 = stablehlo.dynamic_broadcast_in_dim %309, %311, dims = [0, 1] : (tensor<?x1xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %313 = stablehlo.multiply %295, %312 : tensor<?x128xf32>
    %314 = stablehlo.broadcast_in_dim %arg10, dims = [1] : (tensor<128xf32>) -> tensor<1x128xf32>
    %315 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %316 = stablehlo.concatenate %315, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %317 = stablehlo.dynamic_broadcast_in_dim %314, %316, dims = [0, 1] : (tensor<1x128xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %318 = stablehlo.multiply %313, %317 : tensor<?x128xf32>
    %319 = stablehlo.dot_general %318, %arg13, contracting_dims = [1] x [0] : (tensor<?x128xf32>, tensor<128x512xf32>) -> tensor<?x512xf32>
    %320 = stablehlo.multiply %319, %319 : tensor<?x512xf32>
    %321 = stablehlo.multiply %320, %319 : tensor<?x512xf32>
    %322 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %323 = stablehlo.concatenate %322, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %324 = stablehlo.dynamic_broadcast_in_dim %cst_2, %323, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x512xf32>
    %325 = stablehlo.multiply %324, %321 : tensor<?x512xf32>
    %326 = stablehlo.add %319, %325 : tensor<?x512xf32>
    %327 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %328 = stablehlo.concatenate %327, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %329 = stablehlo.dynamic_broadcast_in_dim %cst_1, %328, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x512xf32>
    %330 = stablehlo.multiply %329, %326 : tensor<?x512xf32>
    %331 = stablehlo.tanh %330 : tensor<?x512xf32>
    %332 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %333 = stablehlo.concatenate %332, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %334 = stablehlo.dynamic_broadcast_in_dim %cst_0, %333, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x512xf32>
    %335 = stablehlo.add %334, %331 : tensor<?x512xf32>
    %336 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %337 = stablehlo.concatenate %336, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %338 = stablehlo.dynamic_broadcast_in_dim %cst, %337, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x512xf32>
    %339 = stablehlo.multiply %338, %335 : tensor<?x512xf32>
    %340 = stablehlo.multiply %319, %339 : tensor<?x512xf32>
    %341 = stablehlo.dot_general %340, %arg8, contracting_dims = [1] x [0] : (tensor<?x512xf32>, tensor<512x128xf32>) -> tensor<?x128xf32>
    %342 = stablehlo.add %295, %341 : tensor<?x128xf32>
    %343 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %344 = stablehlo.concatenate %c_17, %343, %c_7, %c_14, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %345 = stablehlo.dynamic_broadcast_in_dim %110, %344, dims = [1, 2, 3, 4] : (tensor<?x4x128x32xf32>, tensor<5xi32>) -> tensor<1x?x4x128x32xf32>
    %346 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %347 = stablehlo.concatenate %c_17, %346, %c_7, %c_14, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %348 = stablehlo.dynamic_broadcast_in_dim %254, %347, dims = [1, 2, 3, 4] : (tensor<?x4x128x32xf32>, tensor<5xi32>) -> tensor<1x?x4x128x32xf32>
    %349 = stablehlo.concatenate %345, %348, dim = 0 : (tensor<1x?x4x128x32xf32>, tensor<1x?x4x128x32xf32>) -> tensor<2x?x4x128x32xf32>
    %350 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %351 = stablehlo.concatenate %c_17, %350, %c_7, %c_14, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %352 = stablehlo.dynamic_broadcast_in_dim %118, %351, dims = [1, 2, 3, 4] : (tensor<?x4x128x32xf32>, tensor<5xi32>) -> tensor<1x?x4x128x32xf32>
    %353 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %354 = stablehlo.concatenate %c_17, %353, %c_7, %c_14, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %355 = stablehlo.dynamic_broadcast_in_dim %262, %354, dims = [1, 2, 3, 4] : (tensor<?x4x128x32xf32>, tensor<5xi32>) -> tensor<1x?x4x128x32xf32>
    %356 = stablehlo.concatenate %352, %355, dim = 0 : (tensor<1x?x4x128x32xf32>, tensor<1x?x4x128x32xf32>) -> tensor<2x?x4x128x32xf32>
    %357 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %358 = stablehlo.dynamic_broadcast_in_dim %c_18, %357, dims = [] : (tensor<i32>, tensor<1xi32>) -> tensor<?xi32>
    %359 = stablehlo.add %arg17, %358 : tensor<?xi32>
    %360 = stablehlo.multiply %342, %342 : tensor<?x128xf32>
    %361 = stablehlo.reduce(%360 init: %cst_13) applies stablehlo.add across dimensions = [1] : (tensor<?x128xf32>, tensor<f32>) -> tensor<?xf32>
    %362 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %363 = stablehlo.concatenate %362, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %364 = stablehlo.dynamic_broadcast_in_dim %361, %363, dims = [0] : (tensor<?xf32>, tensor<2xi32>) -> tensor<?x1xf32>
    %365 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %366 = stablehlo.concatenate %365, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %367 = stablehlo.dynamic_broadcast_in_dim %cst_12, %366, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %368 = stablehlo.divide %364, %367 : tensor<?x1xf32>
    %369 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %370 = stablehlo.concatenate %369, %c_17, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %371 = stablehlo.dynamic_broadcast_in_dim %cst_11, %370, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x1xf32>
    %372 = stablehlo.add %368, %371 : tensor<?x1xf32>
    %373 = stablehlo.rsqrt %372 : tensor<?x1xf32>
    %374 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %375 = stablehlo.concatenate %374, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %376 = stablehlo.dynamic_broadcast_in_dim %373, %375, dims = [0, 1] : (tensor<?x1xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %377 = stablehlo.multiply %342, %376 : tensor<?x128xf32>
    %378 = stablehlo.broadcast_in_dim %arg14, dims = [1] : (tensor<128xf32>) -> tensor<1x128xf32>
    %379 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %380 = stablehlo.concatenate %379, %c_14, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %381 = stablehlo.dynamic_broadcast_in_dim %378, %380, dims = [0, 1] : (tensor<1x128xf32>, tensor<2xi32>) -> tensor<?x128xf32>
    %382 = stablehlo.multiply %377, %381 : tensor<?x128xf32>
    %383 = stablehlo.transpose %arg1, dims = [1, 0] : (tensor<256x128xf32>) -> tensor<128x256xf32>
    %384 = stablehlo.dot_general %382, %383, contracting_dims = [1] x [0] : (tensor<?x128xf32>, tensor<128x256xf32>) -> tensor<?x256xf32>
    return %384, %349, %359, %356 : tensor<?x256xf32>, tensor<2x?x4x128x32xf32>, tensor<?xi32>, tensor<2x?x4x128x32xf32>
  }
  func.func private @_where(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<?x1x128x1xi1>, %arg2: tensor<?x4x1x32xf32>, %arg3: tensor<?x4x128x32xf32>) -> tensor<?x4x128x32xf32> {
    %c = stablehlo.constant dense<32> : tensor<1xi32>
    %c_0 = stablehlo.constant dense<128> : tensor<1xi32>
    %c_1 = stablehlo.constant dense<4> : tensor<1xi32>
    %0 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %1 = stablehlo.concatenate %0, %c_1, %c_0, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %2 = stablehlo.dynamic_broadcast_in_dim %arg1, %1, dims = [0, 1, 2, 3] : (tensor<?x1x128x1xi1>, tensor<4xi32>) -> tensor<?x4x128x32xi1>
    %3 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %4 = stablehlo.concatenate %3, %c_1, %c_0, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %5 = stablehlo.dynamic_broadcast_in_dim %arg2, %4, dims = [0, 1, 2, 3] : (tensor<?x4x1x32xf32>, tensor<4xi32>) -> tensor<?x4x128x32xf32>
    %6 = stablehlo.select %2, %5, %arg3 : tensor<?x4x128x32xi1>, tensor<?x4x128x32xf32>
    return %6 : tensor<?x4x128x32xf32>
  }
  func.func private @_where_0(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<?x1x128xi1>, %arg2: tensor<?x4x128xf32>, %arg3: tensor<f32>) -> tensor<?x4x128xf32> {
    %c = stablehlo.constant dense<128> : tensor<1xi32>
    %c_0 = stablehlo.constant dense<4> : tensor<1xi32>
    %0 = stablehlo.convert %arg3 : tensor<f32>
    %1 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %2 = stablehlo.concatenate %1, %c_0, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %3 = stablehlo.dynamic_broadcast_in_dim %arg1, %2, dims = [0, 1, 2] : (tensor<?x1x128xi1>, tensor<3xi32>) -> tensor<?x4x128xi1>
    %4 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %5 = stablehlo.concatenate %4, %c_0, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %6 = stablehlo.dynamic_broadcast_in_dim %0, %5, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x4x128xf32>
    %7 = stablehlo.select %3, %arg2, %6 : tensor<?x4x128xi1>, tensor<?x4x128xf32>
    return %7 : tensor<?x4x128xf32>
  }
}
