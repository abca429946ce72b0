// Registers the trtspec plugin creators with TensorRT's plugin registry when
// libtrtspec_plugins.so is loaded (ctypes.CDLL, dlopen, trtexec --staticPlugins=...).
#include "trtSpecTreeMask/trtSpecTreeMaskPlugin.h"
#include "trtSpecVerifyBlock/trtSpecVerifyBlockPlugin.h"
#include "trtSpecVerifyGreedy/trtSpecVerifyGreedyPlugin.h"
#include "trtSpecVerifySample/trtSpecVerifySamplePlugin.h"

using trtspec::plugin::TrtSpecTreeMaskCreator;
using trtspec::plugin::TrtSpecVerifyBlockCreator;
using trtspec::plugin::TrtSpecVerifyGreedyCreator;
using trtspec::plugin::TrtSpecVerifySampleCreator;

REGISTER_TENSORRT_PLUGIN(TrtSpecTreeMaskCreator);
REGISTER_TENSORRT_PLUGIN(TrtSpecVerifyGreedyCreator);
REGISTER_TENSORRT_PLUGIN(TrtSpecVerifySampleCreator);
REGISTER_TENSORRT_PLUGIN(TrtSpecVerifyBlockCreator);
