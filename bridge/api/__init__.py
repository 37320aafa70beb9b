"""bridge's Python API: each CLI command as a function, the one implementation
the command is argparse over. Reached as `bridge.export`, `bridge.parity`,
`bridge.fuse`, `bridge.inspect`, `bridge.ops` and `bridge.register_op` (see
bridge/__init__.py); one module per command here.

    import bridge
    result = bridge.export("yolov3-tiny", to="onnx", output="tiny.onnx", config={"input_size": 96})
    result.ok, result.verification, result.fused_ops, result.proto
    report = bridge.parity("yolov3-tiny", config={"input_size": 96}, per_layer=True)
    report.passed, report.rows, report.first_divergence, print(report.table())

Nothing prints unless `progress=` asks; every failure is a bridge.BridgeError
whose message is the CLI's line.
"""
