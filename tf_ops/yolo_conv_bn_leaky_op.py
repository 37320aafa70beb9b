"""PLACEHOLDER (overwrite me): the Python side of the op — op(), composite(), gradient."""


def op(*args, **kwargs):
    raise NotImplementedError("yolo_conv_bn_leaky: the TensorFlow kernel is not written yet")


composite = op
