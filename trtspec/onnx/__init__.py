"""ONNX export of target/drafter step graphs with trtspec plugin nodes, a CPU loop over them, and
the TensorRT engine recipe.

* :mod:`trtspec.onnx.graphs` -- functional step graphs (past K/V in, new K/V out): target verify
  (greedy / sampled / block), draft model, EAGLE-3 head; :mod:`trtspec.onnx.sampling_graph` -- the
  in-graph temperature / top-k / top-p;
* :mod:`trtspec.onnx.export_ops` -- the export ops and their plugin-node translations (dynamo exporter);
* :mod:`trtspec.onnx.qdq` -- Model-Optimizer fake quantization as Q/DQ nodes;
* :mod:`trtspec.onnx.export` -- ``export_step_graphs`` writes the graphs and checks them;
* :mod:`trtspec.onnx.tiers` -- the recipe's batch tiers and trees, the plugins' size limits;
* :mod:`trtspec.onnx.ort_ops` -- the plugin nodes as onnxruntime-extensions Python ops;
* :mod:`trtspec.onnx.loop` (+ ``loop_drafters``, ``loop_sampled``) -- speculative generation over
  onnxruntime sessions;
* :mod:`trtspec.onnx.tensorrt` -- engines (TensorRT Python API) or ``build_engines.sh``, one
  optimization profile per batch tier, and ``runtime_config.json``.
"""
