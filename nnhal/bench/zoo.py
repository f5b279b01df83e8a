"""Reference models built with the model builder (benchmarks, demos, soak tests).

``mobilenet_v1`` is MobileNet-v1 (224x224x3, width 1.0, 1001 classes) with fixed
random weights, NHWC, float32 or quant8 asymm; ``MobileNetWeights`` keeps the
weights so that the same graph can be rebuilt elsewhere (onnxruntime anchor).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import FusedActivationFunc, OperandType as T, OperationType as O
from nnhal.core.types import Model

#: (kind, stride, output channels) after the first 3x3/2 convolution to 32 channels.
MOBILENET_BLOCKS: list[tuple[int, int]] = [
    (1, 64),
    (2, 128),
    (1, 128),
    (2, 256),
    (1, 256),
    (2, 512),
    (1, 512),
    (1, 512),
    (1, 512),
    (1, 512),
    (1, 512),
    (2, 1024),
    (1, 1024),
]
CLASSES = 1001

#: Quantization used by the quant8 variant: activations after RELU6 span [0, 6].
ACT_SCALE = 6.0 / 255.0
IN_SCALE, IN_ZP = 1.0 / 128.0, 128
W_SCALE, W_ZP = 0.02, 128
LOGIT_SCALE, LOGIT_ZP = 0.1, 128


@dataclass
class Layer:
    kind: str  # "conv" | "dw" | "pool" | "fc"
    stride: int
    weight: np.ndarray  # float: NHWC filter [out, kh, kw, in] (dw: [1, kh, kw, C])
    bias: np.ndarray


@dataclass
class MobileNetWeights:
    layers: list[Layer] = field(default_factory=list)


def mobilenet_weights(seed: int = 0) -> MobileNetWeights:
    rng = np.random.default_rng(seed)
    w = MobileNetWeights()

    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return np.asarray(rng.standard_normal(shape) * np.sqrt(2.0 / fan_in) * 0.5, dtype=np.float32)

    w.layers.append(Layer("conv", 2, he((32, 3, 3, 3), 27), np.zeros(32, np.float32)))
    channels = 32
    for stride, out in MOBILENET_BLOCKS:
        w.layers.append(Layer("dw", stride, he((1, 3, 3, channels), 9), np.zeros(channels, np.float32)))
        w.layers.append(Layer("conv", 1, he((out, 1, 1, channels), channels), np.zeros(out, np.float32)))
        channels = out
    w.layers.append(Layer("pool", 1, np.zeros(0, np.float32), np.zeros(0, np.float32)))
    w.layers.append(Layer("fc", 1, he((CLASSES, 1, 1, channels), channels), np.zeros(CLASSES, np.float32)))
    return w


def _quant_weight(w: np.ndarray) -> np.ndarray:
    return np.clip(np.round(w / W_SCALE) + W_ZP, 0, 255).astype(np.uint8)


def mobilenet_v1(weights: MobileNetWeights, quant8: bool = False) -> Model:
    """The NNAPI graph: CONV_2D / DEPTHWISE_CONV_2D with fused RELU6 (implicit SAME
    padding), AVERAGE_POOL_2D 7x7, a 1x1 CONV_2D to the logits, RESHAPE, SOFTMAX."""
    b = ModelBuilder()
    relu6 = int(FusedActivationFunc.RELU6)
    if quant8:
        act_t, in_scale, in_zp = T.TENSOR_QUANT8_ASYMM, IN_SCALE, IN_ZP
    else:
        act_t, in_scale, in_zp = T.TENSOR_FLOAT32, 0.0, 0
    x = b.input(act_t, [1, 224, 224, 3], in_scale, in_zp)
    size, channels, scale, zp = 224, 3, in_scale, in_zp
    for layer in weights.layers:
        if layer.kind == "pool":
            x = b.op(O.AVERAGE_POOL_2D, [x, *b.ints(2, 1, 1, size, size, 0)], act_t, [1, 1, 1, channels], scale, zp)
            size = 1
            continue
        out_ch = layer.weight.shape[0] if layer.kind != "dw" else channels
        out_size = (size + layer.stride - 1) // layer.stride
        act = 0 if layer.kind == "fc" else relu6
        if quant8:
            wq = b.constant(_quant_weight(layer.weight), T.TENSOR_QUANT8_ASYMM, W_SCALE, W_ZP)
            bias = b.constant(
                np.round(layer.bias / (scale * W_SCALE)).astype(np.int32), T.TENSOR_INT32, scale * W_SCALE
            )
            o_scale, o_zp = (LOGIT_SCALE, LOGIT_ZP) if layer.kind == "fc" else (ACT_SCALE, 0)
        else:
            wq = b.constant(layer.weight)
            bias = b.constant(layer.bias)
            o_scale, o_zp = 0.0, 0
        if layer.kind == "dw":
            params = b.ints(1, layer.stride, layer.stride, 1, act)
            x = b.op(O.DEPTHWISE_CONV_2D, [x, wq, bias, *params], act_t, [1, out_size, out_size, out_ch], o_scale, o_zp)
        else:
            params = b.ints(1, layer.stride, layer.stride, act)
            x = b.op(O.CONV_2D, [x, wq, bias, *params], act_t, [1, out_size, out_size, out_ch], o_scale, o_zp)
        size, channels, scale, zp = out_size, out_ch, o_scale, o_zp
    flat = b.op(O.RESHAPE, [x, b.constant(np.array([1, CLASSES], np.int32))], act_t, [1, CLASSES], scale, zp)
    if quant8:
        probs = b.op(O.SOFTMAX, [flat, b.float32(1.0)], act_t, [1, CLASSES], 1.0 / 256.0, 0)
    else:
        probs = b.op(O.SOFTMAX, [flat, b.float32(1.0)], act_t, [1, CLASSES])
    return b.outputs(probs).finish()


def mobilenet_input(quant8: bool, seed: int = 1) -> np.ndarray:
    img = np.random.default_rng(seed).uniform(-1.0, 1.0, (1, 224, 224, 3)).astype(np.float32)
    if quant8:
        return np.asarray(np.clip(np.round(img / IN_SCALE) + IN_ZP, 0, 255), dtype=np.uint8)
    return img
