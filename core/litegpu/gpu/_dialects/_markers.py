"""The marker lines a dialect writes at the top of a source whose multiply-adds are as written (``fma``
or not; ``litegpu.gpu.lgk.emit.MULTIPLY_ADD``), or whose buffers come as one base pointer.  Apart from the
emitters, so that what reads them back (the SPIR-V decoration, the OpenCL build options and binding) does not
import the kernel language's emitter, parser nodes and checker: a warm start takes its kernels from the serialization cache and renders nothing."""

from __future__ import annotations

__all__ = ["GLSL_NO_CONTRACTION", "OPENCL_ARGUMENT_BUFFER", "OPENCL_BASE_POINTER", "OPENCL_NO_CONTRACTION"]

#: GLSL has no module-wide switch (``precise`` is per variable): ``litegpu.gpu.spirv`` decorates the float
#: arithmetic of a source holding this comment ``NoContraction``
GLSL_NO_CONTRACTION = "// no contraction: the multiply-adds are as the source spells them"
#: OpenCL's pragma (the backend then builds the program without ``-cl-mad-enable``)
OPENCL_NO_CONTRACTION = "#pragma OPENCL FP_CONTRACT OFF"
#: the first line of an OpenCL source whose kernel takes its buffers as one allocation and a byte offset per
#: buffer (``render(..., base_pointer="args")``): the backend binds such a kernel with the allocation every buffer
#: of the launch lies in and the offsets, not with a sub-buffer per buffer
OPENCL_BASE_POINTER = "// litegpu: buffers as one base pointer and byte offsets"
#: the same with the offsets and the params read from an argument buffer (``render(..., base_pointer="buffer")``)
OPENCL_ARGUMENT_BUFFER = "// litegpu: buffers as one base pointer, offsets and params in an argument buffer"
