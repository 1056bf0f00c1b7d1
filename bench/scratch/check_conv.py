import sys, time, numpy as np
sys.path.insert(0, "bench/scratch")
from _mini_tfl import single_op_model, S
from _hand import prep
from ai_edge_litert.interpreter import Interpreter, OpResolverType
rng = np.random.default_rng(1)
def litert(model, x, ref=True):
    it = Interpreter(model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF if ref else OpResolverType.AUTO, num_threads=1)
    it.allocate_tensors(); it.set_tensor(it.get_input_details()[0]["index"], x); it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])
worst = 0
for (N,H,W,C,O,K,s,d,pad,act,G,bias) in [(1,7,9,3,5,3,1,1,0,0,1,True),(2,8,8,4,6,3,2,1,0,1,1,True),(1,9,7,5,4,3,1,2,1,3,1,True),(1,11,11,6,4,5,2,1,0,0,2,True),(1,6,6,8,8,1,1,1,0,0,1,True),(1,7,7,8,8,1,2,1,0,0,1,True),(1,5,6,3,2,2,2,1,1,0,1,True),(1,10,10,6,6,3,1,1,0,1,3,True)]:
    x = rng.standard_normal((N,H,W,C), dtype=np.float32)
    w = rng.standard_normal((O,K,K,C//G), dtype=np.float32)
    b = rng.standard_normal(O, dtype=np.float32)
    o = S.Conv2DOptionsT(); o.padding = pad; o.strideW = o.strideH = s; o.dilationWFactor = o.dilationHFactor = d; o.fusedActivationFunction = act
    opts = dict(padding=pad, stride_w=s, stride_h=s, dilation_w_factor=d, dilation_h_factor=d, fused_activation_function=act)
    ins = [(x, False), (w, True)] + ([(b, True)] if bias else [])
    p, arrs = prep("CONV_2D", opts, ins)
    got = p.run(arrs)[0]
    shp = got.shape
    m = single_op_model(S.BuiltinOperator.CONV_2D, S.BuiltinOptions.Conv2DOptions, o, [(a.shape, None if i == 0 else a) for i, (a, _) in enumerate(ins)], shp)
    ref = litert(m, x)
    e = np.abs(got - ref).max() / np.abs(ref).max(); worst = max(worst, e)
    print("conv", (N,H,W,C,O,K,s,d,pad,act,G), got.shape, ref.shape, e)
for (N,H,W,C,M,K,s,d,pad,act) in [(1,7,9,3,1,3,1,1,0,0),(2,8,8,4,2,3,2,1,0,1),(1,9,7,5,1,3,1,2,1,3),(1,11,11,6,1,5,2,1,0,0),(1,12,13,5,3,3,2,2,0,0),(1,6,6,8,1,1,1,1,0,0),(1,9,9,7,1,5,3,1,1,0), (1,8,10,4,1,3,2,1,1,0)]:
    x = rng.standard_normal((N,H,W,C), dtype=np.float32)
    w = rng.standard_normal((1,K,K,C*M), dtype=np.float32)
    b = rng.standard_normal(C*M, dtype=np.float32)
    o = S.DepthwiseConv2DOptionsT(); o.padding = pad; o.strideW = o.strideH = s; o.dilationWFactor = o.dilationHFactor = d; o.fusedActivationFunction = act; o.depthMultiplier = M
    opts = dict(padding=pad, stride_w=s, stride_h=s, dilation_w_factor=d, dilation_h_factor=d, fused_activation_function=act, depth_multiplier=M)
    ins = [(x, False), (w, True), (b, True)]
    p, arrs = prep("DEPTHWISE_CONV_2D", opts, ins)
    got = p.run(arrs)[0]
    m = single_op_model(S.BuiltinOperator.DEPTHWISE_CONV_2D, S.BuiltinOptions.DepthwiseConv2DOptions, o, [(a.shape, None if i == 0 else a) for i, (a, _) in enumerate(ins)], got.shape)
    ref = litert(m, x)
    e = np.abs(got - ref).max() / np.abs(ref).max(); worst = max(worst, e)
    print("dw", (N,H,W,C,M,K,s,d,pad,act), got.shape, e)
print("worst", worst)
