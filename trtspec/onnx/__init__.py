"""ONNX export of target/draft step graphs with trtspec plugin nodes, and a CPU loop over them.

* :mod:`trtspec.onnx.graphs` -- functional step graphs (past K/V in, new K/V out);
* :mod:`trtspec.onnx.export` -- ``export_step_graphs`` writes them and checks them;
* :mod:`trtspec.onnx.ort_ops` -- the plugin nodes as onnxruntime-extensions Python ops;
* :mod:`trtspec.onnx.loop` -- greedy speculative generation over onnxruntime sessions.
"""
