"""The onnxruntime anchor for the MobileNet benchmarks: the same graph as
``zoo.mobilenet_v1`` built with onnx.helper (NCHW), float32 or QLinear quant8.

Needs the ``bench`` extra (onnx, onnxruntime); imported only by ``nnhal bench``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nnhal.bench import zoo
from nnhal.core.types import Model


def _helpers() -> tuple[Any, Any, Any]:
    import onnx
    from onnx import TensorProto, helper

    return onnx, TensorProto, helper


def mobilenet_onnx(weights: zoo.MobileNetWeights, quant8: bool) -> bytes:
    onnx, tp, helper = _helpers()
    nodes: list[Any] = []
    inits: list[Any] = []
    counter = [0]

    def name(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def const(value: np.ndarray | np.generic, prefix: str = "c") -> str:
        n = name(prefix)
        inits.append(onnx.numpy_helper.from_array(np.asarray(value), n))
        return n

    x = "input"
    elem = tp.UINT8 if quant8 else tp.FLOAT
    scale, zp = (zoo.IN_SCALE, zoo.IN_ZP) if quant8 else (0.0, 0)
    channels = 3
    for layer in weights.layers:
        if layer.kind == "pool":
            y = name("pool")
            if quant8:
                nodes.append(
                    helper.make_node(
                        "QLinearGlobalAveragePool",
                        [
                            x,
                            const(np.float32(scale)),
                            const(np.uint8(zp)),
                            const(np.float32(scale)),
                            const(np.uint8(zp)),
                        ],
                        [y],
                        domain="com.microsoft",
                        channels_last=0,
                    )
                )
            else:
                nodes.append(helper.make_node("GlobalAveragePool", [x], [y]))
            x = y
            continue
        if layer.kind == "dw":
            w = layer.weight.transpose(3, 0, 1, 2)  # [1,kh,kw,C] -> [C,1,kh,kw]
            group = channels
            out_ch = channels
        else:
            w = layer.weight.transpose(0, 3, 1, 2)  # [out,kh,kw,in] -> [out,in,kh,kw]
            group = 1
            out_ch = layer.weight.shape[0]
        attrs = {"strides": [layer.stride, layer.stride], "auto_pad": "SAME_UPPER", "group": group}
        y = name("conv")
        if quant8:
            wq = np.clip(np.round(w / zoo.W_SCALE) + zoo.W_ZP, 0, 255).astype(np.uint8)
            bias = np.round(layer.bias / (scale * zoo.W_SCALE)).astype(np.int32)
            o_scale, o_zp = (zoo.LOGIT_SCALE, zoo.LOGIT_ZP) if layer.kind == "fc" else (zoo.ACT_SCALE, 0)
            inputs = [
                x,
                const(np.float32(scale)),
                const(np.uint8(zp)),
                const(wq),
                const(np.float32(zoo.W_SCALE)),
                const(np.uint8(zoo.W_ZP)),
                const(np.float32(o_scale)),
                const(np.uint8(o_zp)),
                const(bias),
            ]
            nodes.append(helper.make_node("QLinearConv", inputs, [y], **attrs))
            scale, zp = o_scale, o_zp
        else:
            nodes.append(helper.make_node("Conv", [x, const(np.ascontiguousarray(w)), const(layer.bias)], [y], **attrs))
            if layer.kind != "fc":
                clipped = name("relu6")
                nodes.append(helper.make_node("Clip", [y, const(np.float32(0.0)), const(np.float32(6.0))], [clipped]))
                y = clipped
        x = y
        channels = out_ch
    if quant8:
        deq = name("deq")
        nodes.append(helper.make_node("DequantizeLinear", [x, const(np.float32(scale)), const(np.uint8(zp))], [deq]))
        x = deq
    flat = name("flat")
    nodes.append(helper.make_node("Reshape", [x, const(np.array([1, zoo.CLASSES], np.int64))], [flat]))
    nodes.append(helper.make_node("Softmax", [flat], ["probs"], axis=1))
    graph = helper.make_graph(
        nodes,
        "mobilenet_v1",
        [helper.make_tensor_value_info("input", elem, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("probs", tp.FLOAT, [1, zoo.CLASSES])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    return bytes(model.SerializeToString())


def session(model: bytes) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class MobileNetCase:
    """One MobileNet-v1 benchmark's inputs: our model and its NHWC image, and the anchor's
    session with the same image as its NCHW feed."""

    model: Model
    image: np.ndarray
    session: Any
    feed: dict[str, np.ndarray]

    def run_anchor(self) -> Any:
        """One inference of the anchor (what the benchmarks time)."""
        return self.session.run(None, self.feed)

    def anchor_output(self) -> np.ndarray:
        """The anchor's answer, flattened."""
        return np.asarray(self.run_anchor()[0]).reshape(-1)


def mobilenet_case(quant8: bool) -> MobileNetCase:
    """MobileNet-v1 (``quant8`` or float32) on the zoo's weights, for us and for the anchor."""
    weights = zoo.mobilenet_weights()
    image = zoo.mobilenet_input(quant8)
    return MobileNetCase(
        zoo.mobilenet_v1(weights, quant8),
        image,
        session(mobilenet_onnx(weights, quant8)),
        {"input": np.ascontiguousarray(image.transpose(0, 3, 1, 2))},
    )
