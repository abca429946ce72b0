// Host-only test of the plugin plumbing against the public TensorRT headers, without libnvinfer or
// a GPU: creators (fields, defaults, ranges, bad fields), serialization round trip, capabilities,
// dtype/format support, output dtypes and shapes (through a mock IExprBuilder that evaluates
// constant expressions), shape checks with their messages, workspace sizes, and what enqueue hands
// to the launchers (recorded by stub launchers defined here instead of the CUDA library).
//
// Built and run by tests/test_plugins.py:
//   g++ -std=c++17 -isystem <TensorRT include> -isystem <CUDA include> -Icpp/include -Icpp/src -Iplugins
//       plugins/tests/pluginHostTest.cpp plugins/trtSpec*/*Plugin.cpp -o pluginHostTest && ./pluginHostTest
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "trtspec/kernels.h"
#include "trtSpecTreeMask/trtSpecTreeMaskPlugin.h"
#include "trtSpecVerifyBlock/trtSpecVerifyBlockPlugin.h"
#include "trtSpecVerifyGreedy/trtSpecVerifyGreedyPlugin.h"
#include "trtSpecVerifySample/trtSpecVerifySamplePlugin.h"

using namespace nvinfer1;
using namespace trtspec::plugin;

static int gFailures = 0;
#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            ++gFailures;                                                     \
        }                                                                    \
    } while (0)

// ---- libnvinfer stand-ins --------------------------------------------------------------------
namespace {
struct RecordingLogger : ILogger {
    std::string last;
    void log(Severity severity, AsciiChar const* msg) noexcept override {
        if (severity == Severity::kERROR) last = msg;
    }
} gLogger;
}  // namespace
extern "C" ILogger* getLogger() noexcept { return &gLogger; }

// ---- launcher stubs: record the last call --------------------------------------------------
namespace {
struct Call {
    std::string op;
    void const* in[7]{};
    void* out[4]{};
    int32_t batch{}, nodes{}, maxDepth{};
    int64_t vocab{};
    trtspec::DType dtype{};
    bool flag{};
    int tokenBits{};  // 32 or 64: the draft-token overload the plugin called
    void* workspace{};
    size_t workspaceBytes{};
    cudaStream_t stream{};
} gCall;
}  // namespace

namespace trtspec {
namespace cuda {
size_t verifySampleWorkspaceSize(int32_t batch, int64_t vocab) {
    return static_cast<size_t>(batch) * 2 * ((static_cast<size_t>(vocab) * 4 + 255) / 256 * 256);
}
size_t verifyBlockWorkspaceSize(int32_t, int32_t, int64_t) { return 0; }
Status treeMetadata(const int32_t* parents, const int32_t* numNodes, int32_t batch, int32_t nodes, int32_t* packedMask,
                    int32_t* depth, int32_t* firstChild, int32_t* nextSibling, cudaStream_t stream) {
    gCall = Call{"treeMetadata", {parents, numNodes}, {packedMask, depth, firstChild, nextSibling}, batch, nodes};
    gCall.stream = stream;
    return Status::kSuccess;
}
Status verifyGreedy(const int64_t* tokens, const int32_t* parents, const void* logits, DType dtype,
                    const int32_t* numNodes, int32_t batch, int32_t nodes, int64_t vocab, int32_t maxDepth,
                    int32_t* acceptedLen, int32_t* acceptedNodes, int64_t* bonusToken, cudaStream_t stream) {
    gCall = Call{"verifyGreedy", {tokens, parents, logits, numNodes}, {acceptedLen, acceptedNodes, bonusToken},
                 batch, nodes, maxDepth, vocab, dtype};
    gCall.stream = stream;
    return Status::kSuccess;
}
template <typename Token>
Status recordSample(const Token* draftTokens, const int32_t* parents, const float* targetProbs,
                    const float* draftProbs, const int32_t* draftLens, const int64_t* seed, const int64_t* offset,
                    int32_t batch, int32_t draftLen, int64_t vocab, int32_t maxDepth, bool withoutReplacement,
                    int32_t* acceptedLen, int32_t* acceptedNodes, int64_t* bonusToken, void* workspace,
                    size_t workspaceBytes, cudaStream_t stream) {
    gCall = Call{"verifySample", {draftTokens, parents, targetProbs, draftProbs, seed, offset, draftLens},
                 {acceptedLen, acceptedNodes, bonusToken}, batch, draftLen, maxDepth, vocab};
    gCall.flag = withoutReplacement;
    gCall.tokenBits = 8 * sizeof(Token);
    gCall.workspace = workspace;
    gCall.workspaceBytes = workspaceBytes;
    gCall.stream = stream;
    return Status::kSuccess;
}
Status verifySample(const int32_t* a, const int32_t* b, const float* c, const float* d, const int32_t* e,
                    const int64_t* f, const int64_t* g, int32_t h, int32_t i, int64_t j, int32_t k, bool l, int32_t* m,
                    int32_t* n, int64_t* o, void* p, size_t q, cudaStream_t r) {
    return recordSample(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r);
}
Status verifySample(const int64_t* a, const int32_t* b, const float* c, const float* d, const int32_t* e,
                    const int64_t* f, const int64_t* g, int32_t h, int32_t i, int64_t j, int32_t k, bool l, int32_t* m,
                    int32_t* n, int64_t* o, void* p, size_t q, cudaStream_t r) {
    return recordSample(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r);
}
template <typename Token>
Status recordBlock(const Token* draftTokens, const float* targetProbs, const float* draftProbs,
                   const int32_t* draftLens, const int64_t* seed, const int64_t* offset, int32_t batch,
                   int32_t draftLen, int64_t vocab, int32_t* acceptedLen, int64_t* bonusToken, void* workspace,
                   size_t workspaceBytes, cudaStream_t stream) {
    gCall = Call{"verifyBlock", {draftTokens, targetProbs, draftProbs, seed, offset, draftLens},
                 {acceptedLen, bonusToken}, batch, draftLen, 0, vocab};
    gCall.tokenBits = 8 * sizeof(Token);
    gCall.workspace = workspace;
    gCall.workspaceBytes = workspaceBytes;
    gCall.stream = stream;
    return Status::kInvalidToken;  // to see the status travel back
}
Status verifyBlock(const int32_t* a, const float* b, const float* c, const int32_t* d, const int64_t* e,
                   const int64_t* f, int32_t g, int32_t h, int64_t i, int32_t* j, int64_t* k, void* l, size_t m,
                   cudaStream_t n) {
    return recordBlock(a, b, c, d, e, f, g, h, i, j, k, l, m, n);
}
Status verifyBlock(const int64_t* a, const float* b, const float* c, const int32_t* d, const int64_t* e,
                   const int64_t* f, int32_t g, int32_t h, int64_t i, int32_t* j, int64_t* k, void* l, size_t m,
                   cudaStream_t n) {
    return recordBlock(a, b, c, d, e, f, g, h, i, j, k, l, m, n);
}
}  // namespace cuda
}  // namespace trtspec

// ---- a mock IExprBuilder over constant expressions --------------------------------------------
namespace {
struct ConstImpl : apiv::VDimensionExpr {
    int64_t value;
    explicit ConstImpl(int64_t v) : value(v) {}
    bool isConstant() const override { return true; }
    int64_t getConstantValue() const override { return value; }
    bool isSizeTensor() const override { return false; }
};
struct ConstExpr : IDimensionExpr {
    ConstImpl impl;
    explicit ConstExpr(int64_t v) : impl(v) { mImpl = &impl; }
};
struct BuilderImpl : apiv::VExprBuilder {
    std::vector<std::unique_ptr<ConstExpr>> pool;
    IDimensionExpr const* constant(int64_t v) override {
        pool.emplace_back(new ConstExpr(v));
        return pool.back().get();
    }
    IDimensionExpr const* operation(DimensionOperation op, IDimensionExpr const& a, IDimensionExpr const& b) override {
        int64_t const x = a.getConstantValue(), y = b.getConstantValue();
        switch (op) {
            case DimensionOperation::kSUM: return constant(x + y);
            case DimensionOperation::kPROD: return constant(x * y);
            case DimensionOperation::kSUB: return constant(x - y);
            case DimensionOperation::kCEIL_DIV: return constant((x + y - 1) / y);
            case DimensionOperation::kFLOOR_DIV: return constant(x / y);
            default: return constant(-999);
        }
    }
    IDimensionExpr const* declareSizeTensor(int32_t, IDimensionExpr const&, IDimensionExpr const&) override {
        return nullptr;
    }
};
struct MockBuilder : IExprBuilder {
    BuilderImpl impl;
    MockBuilder() { mImpl = &impl; }
    DimsExprs dims(std::vector<int64_t> const& d) {
        DimsExprs e;
        e.nbDims = static_cast<int32_t>(d.size());
        for (size_t i = 0; i < d.size(); ++i) e.d[i] = impl.constant(d[i]);
        return e;
    }
};

Dims makeDims(std::vector<int64_t> const& d) {
    Dims out;
    out.nbDims = static_cast<int32_t>(d.size());
    for (size_t i = 0; i < d.size(); ++i) out.d[i] = d[i];
    return out;
}
std::vector<int64_t> values(DimsExprs const& e) {
    std::vector<int64_t> v;
    for (int32_t i = 0; i < e.nbDims; ++i) v.push_back(e.d[i]->getConstantValue());
    return v;
}
DynamicPluginTensorDesc dyn(std::vector<int64_t> const& d, DataType t) {
    DynamicPluginTensorDesc x{};
    x.desc.dims = makeDims(d);
    x.desc.type = t;
    x.desc.format = TensorFormat::kLINEAR;
    x.min = x.max = x.opt = makeDims(d);
    return x;
}
PluginTensorDesc desc(std::vector<int64_t> const& d, DataType t) { return dyn(d, t).desc; }

template <typename Plugin>
Plugin* as(IPluginV3* p) {
    return static_cast<Plugin*>(p);  // the creators return exactly this type
}

IPluginV3* create(IPluginCreatorV3One& creator, std::vector<PluginField> const& fields) {
    PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
    gLogger.last.clear();
    return creator.createPlugin("node", &fc, TensorRTPhase::kBUILD);
}
}  // namespace

// ---- tests --------------------------------------------------------------------------------------
static void testCreators() {
    TrtSpecVerifySampleCreator sample;
    CHECK(std::string(sample.getPluginName()) == "TrtSpecVerifySample");
    CHECK(std::string(sample.getPluginVersion()) == "2");
    CHECK(std::string(sample.getPluginNamespace()) == "trtspec");
    PluginFieldCollection const* names = sample.getFieldNames();
    CHECK(names->nbFields == 2);
    CHECK(std::string(names->fields[0].name) == "max_depth");
    CHECK(std::string(names->fields[1].name) == "siblings_without_replacement");
    CHECK(TrtSpecTreeMaskCreator().getFieldNames()->nbFields == 0);
    CHECK(TrtSpecVerifyBlockCreator().getFieldNames()->nbFields == 0);

    int32_t const depth3 = 3, one = 1, tooBig = 4096, two = 2;
    int64_t const depth5 = 5;
    float const f = 1.0f;
    char const version[] = "1";
    std::unique_ptr<IPluginV3> ok(create(sample, {{"max_depth", &depth3, PluginFieldType::kINT32, 1},
                                                  {"siblings_without_replacement", &one, PluginFieldType::kINT32, 1},
                                                  {"plugin_version", version, PluginFieldType::kCHAR, 1}}));
    CHECK(ok != nullptr);
    std::unique_ptr<IPluginV3> ok64(create(sample, {{"max_depth", &depth5, PluginFieldType::kINT64, 1}}));
    CHECK(ok64 != nullptr);
    CHECK(create(sample, {{"max_dept", &depth3, PluginFieldType::kINT32, 1}}) == nullptr);
    CHECK(gLogger.last.find("unknown attribute 'max_dept'") != std::string::npos);
    CHECK(create(sample, {{"max_depth", &tooBig, PluginFieldType::kINT32, 1}}) == nullptr);
    CHECK(gLogger.last.find("'max_depth' = 4096 outside [-1, 4095]") != std::string::npos);
    CHECK(create(sample, {{"siblings_without_replacement", &two, PluginFieldType::kINT32, 1}}) == nullptr);
    CHECK(create(sample, {{"max_depth", &f, PluginFieldType::kFLOAT32, 1}}) == nullptr);
    CHECK(gLogger.last.find("must be one int32") != std::string::npos);

    // serialization round trip keeps the attributes
    PluginFieldCollection const* saved =
        static_cast<IPluginV3OneRuntime*>(ok->getCapabilityInterface(PluginCapabilityType::kRUNTIME))
            ->getFieldsToSerialize();
    CHECK(saved->nbFields == 2);
    std::unique_ptr<IPluginV3> back(sample.createPlugin("node", saved, TensorRTPhase::kRUNTIME));
    CHECK(back != nullptr);
    MockBuilder builder;
    DimsExprs in[6] = {builder.dims({2, 8}), builder.dims({2, 9}), builder.dims({2, 9, 7}), builder.dims({2, 8, 7}),
                       builder.dims({2}), builder.dims({2})};
    DimsExprs out[3];
    CHECK(as<TrtSpecVerifySamplePlugin>(back.get())->getOutputShapes(in, 6, nullptr, 0, out, 3, builder) == 0);
    CHECK((values(out[1]) == std::vector<int64_t>{2, 4}));  // max_depth 3 survived: L = 4
    CHECK((values(out[0]) == std::vector<int64_t>{2}) && (values(out[2]) == std::vector<int64_t>{2}));

    // capabilities and clone
    for (auto type : {PluginCapabilityType::kCORE, PluginCapabilityType::kBUILD, PluginCapabilityType::kRUNTIME})
        CHECK(ok->getCapabilityInterface(type) != nullptr);
    std::unique_ptr<IPluginV3> copy(ok->clone());
    CHECK(copy != nullptr);
    auto* core = static_cast<IPluginV3OneCore*>(copy->getCapabilityInterface(PluginCapabilityType::kCORE));
    CHECK(std::string(core->getPluginName()) == "TrtSpecVerifySample");
}

static void testGreedy() {
    TrtSpecVerifyGreedyCreator creator;
    std::unique_ptr<IPluginV3> p(create(creator, {}));
    auto* plugin = as<TrtSpecVerifyGreedyPlugin>(p.get());
    DynamicPluginTensorDesc io[7] = {dyn({2, 5}, DataType::kINT64), dyn({2, 5}, DataType::kINT32),
                                     dyn({2, 5, 11}, DataType::kBF16), dyn({2}, DataType::kINT32),
                                     dyn({2}, DataType::kINT32), dyn({2, 5}, DataType::kINT32),
                                     dyn({2}, DataType::kINT64)};
    // dtypes and formats (3 inputs + 3 outputs, and with the optional num_nodes)
    CHECK(plugin->supportsFormatCombination(2, io, 3, 3));
    io[2].desc.type = DataType::kHALF;
    CHECK(plugin->supportsFormatCombination(2, io, 3, 3));
    io[2].desc.type = DataType::kINT32;
    CHECK(!plugin->supportsFormatCombination(2, io, 3, 3));
    io[2].desc.type = DataType::kBF16;
    io[0].desc.type = DataType::kINT32;
    CHECK(!plugin->supportsFormatCombination(0, io, 3, 3));
    io[0].desc.type = DataType::kINT64;
    io[0].desc.format = TensorFormat::kCHW32;
    CHECK(!plugin->supportsFormatCombination(0, io, 3, 3));
    io[0].desc.format = TensorFormat::kLINEAR;
    CHECK(plugin->supportsFormatCombination(3, io, 4, 3));   // num_nodes int32
    CHECK(plugin->supportsFormatCombination(6, io, 4, 3));   // bonus_token int64
    CHECK(!plugin->supportsFormatCombination(0, io, 2, 3));  // too few inputs
    DataType types[3];
    DataType const inTypes[3] = {DataType::kINT64, DataType::kINT32, DataType::kHALF};
    CHECK(plugin->getOutputDataTypes(types, 3, inTypes, 3) == 0);
    CHECK(types[0] == DataType::kINT32 && types[1] == DataType::kINT32 && types[2] == DataType::kINT64);

    // shapes: default max_depth -1 -> L = N
    MockBuilder builder;
    DimsExprs in[3] = {builder.dims({4, 6}), builder.dims({4, 6}), builder.dims({4, 6, 100})};
    DimsExprs out[3];
    CHECK(plugin->getOutputShapes(in, 3, nullptr, 0, out, 3, builder) == 0);
    CHECK((values(out[1]) == std::vector<int64_t>{4, 6}));

    // shape checks: build time (-1) passes, mismatches are named
    DynamicPluginTensorDesc cfg[3] = {dyn({-1, 5}, DataType::kINT64), dyn({-1, 5}, DataType::kINT32),
                                      dyn({-1, 5, 11}, DataType::kBF16)};
    CHECK(plugin->configurePlugin(cfg, 3, io + 4, 3) == 0);
    cfg[1] = dyn({-1, 6}, DataType::kINT32);
    CHECK(plugin->configurePlugin(cfg, 3, io + 4, 3) != 0);
    CHECK(gLogger.last.find("input 'parents' dimension 1 is 6, expected 5") != std::string::npos);
    cfg[1] = dyn({-1, 5}, DataType::kINT32);
    cfg[2] = dyn({-1, 5}, DataType::kBF16);
    CHECK(plugin->configurePlugin(cfg, 3, io + 4, 3) != 0);
    CHECK(gLogger.last.find("input 'target_logits' must have 3 dimensions, got 2") != std::string::npos);
    cfg[0] = dyn({-1, 5000}, DataType::kINT64);
    CHECK(plugin->configurePlugin(cfg, 3, io + 4, 3) != 0);

    // enqueue: 3 inputs -> no num_nodes; 4 inputs -> num_nodes passed
    PluginTensorDesc rin[4] = {desc({2, 5}, DataType::kINT64), desc({2, 5}, DataType::kINT32),
                               desc({2, 5, 11}, DataType::kBF16), desc({2}, DataType::kINT32)};
    PluginTensorDesc rout[3] = {desc({2}, DataType::kINT32), desc({2, 5}, DataType::kINT32),
                                desc({2}, DataType::kINT64)};
    int dummy[8];
    void const* inputs[4] = {&dummy[0], &dummy[1], &dummy[2], &dummy[3]};
    void* outputs[3] = {&dummy[4], &dummy[5], &dummy[6]};
    auto stream = reinterpret_cast<cudaStream_t>(&dummy[7]);
    CHECK(plugin->onShapeChange(rin, 3, rout, 3) == 0);
    CHECK(plugin->enqueue(rin, rout, inputs, outputs, nullptr, stream) == 0);
    CHECK(gCall.op == "verifyGreedy" && gCall.dtype == trtspec::DType::kBFloat16 && gCall.batch == 2 &&
          gCall.nodes == 5 && gCall.vocab == 11 && gCall.maxDepth == 4 && gCall.in[3] == nullptr &&
          gCall.in[2] == inputs[2] && gCall.out[2] == outputs[2] && gCall.stream == stream);
    CHECK(plugin->onShapeChange(rin, 4, rout, 3) == 0);
    CHECK(plugin->enqueue(rin, rout, inputs, outputs, nullptr, stream) == 0);
    CHECK(gCall.in[3] == inputs[3]);
    rin[2].type = DataType::kFLOAT;
    CHECK(plugin->enqueue(rin, rout, inputs, outputs, nullptr, stream) == 0 && gCall.dtype == trtspec::DType::kFloat32);
}

static void testTreeMaskSampleBlock() {
    MockBuilder builder;
    {  // tree mask: [B, N, ceil(N/32)] and [B, N]; first_child/next_sibling in the workspace
        std::unique_ptr<IPluginV3> p(create(*std::make_unique<TrtSpecTreeMaskCreator>(), {}));
        auto* plugin = as<TrtSpecTreeMaskPlugin>(p.get());
        DimsExprs in[1] = {builder.dims({3, 33})};
        DimsExprs out[2];
        CHECK(plugin->getOutputShapes(in, 1, nullptr, 0, out, 2, builder) == 0);
        CHECK((values(out[0]) == std::vector<int64_t>{3, 33, 2}) && (values(out[1]) == std::vector<int64_t>{3, 33}));
        DynamicPluginTensorDesc d[1] = {dyn({3, 33}, DataType::kINT32)};
        size_t const ws = plugin->getWorkspaceSize(d, 1, nullptr, 2);
        CHECK(ws >= 2 * 3 * 33 * 4 + 255);
        PluginTensorDesc rin[1] = {desc({3, 33}, DataType::kINT32)};
        std::vector<char> buffer(ws);
        int dummy[4];
        void const* inputs[1] = {&dummy[0]};
        void* outputs[2] = {&dummy[1], &dummy[2]};
        CHECK(plugin->onShapeChange(rin, 1, nullptr, 2) == 0);
        CHECK(plugin->enqueue(rin, nullptr, inputs, outputs, buffer.data() + 1, nullptr) == 0);
        auto* fc = static_cast<char*>(gCall.out[2]);
        auto* ns = static_cast<char*>(gCall.out[3]);
        CHECK(gCall.op == "treeMetadata" && gCall.in[1] == nullptr && reinterpret_cast<uintptr_t>(fc) % 256 == 0 &&
              ns - fc >= 3 * 33 * 4 && ns + 3 * 33 * 4 <= buffer.data() + ws);
    }
    {  // sample: draft layout, per-request seed/offset, int32 or int64 drafts, aligned workspace
        int32_t const one = 1;
        std::unique_ptr<IPluginV3> p(create(*std::make_unique<TrtSpecVerifySampleCreator>(),
                                            {{"siblings_without_replacement", &one, PluginFieldType::kINT32, 1}}));
        auto* plugin = as<TrtSpecVerifySamplePlugin>(p.get());
        DynamicPluginTensorDesc d[7] = {dyn({3, 4}, DataType::kINT32), dyn({3, 5}, DataType::kINT32),
                                        dyn({3, 5, 111}, DataType::kFLOAT), dyn({3, 4, 111}, DataType::kFLOAT),
                                        dyn({3}, DataType::kINT64), dyn({3}, DataType::kINT64),
                                        dyn({3}, DataType::kINT32)};
        CHECK(plugin->supportsFormatCombination(0, d, 6, 3));  // int32 drafts
        d[0].desc.type = DataType::kINT64;
        CHECK(plugin->supportsFormatCombination(0, d, 6, 3));  // int64 drafts
        d[0].desc.type = DataType::kFLOAT;
        CHECK(!plugin->supportsFormatCombination(0, d, 6, 3));
        d[0].desc.type = DataType::kINT32;
        d[4].desc.type = DataType::kINT32;
        CHECK(!plugin->supportsFormatCombination(4, d, 6, 3));  // seed must be int64
        d[4].desc.type = DataType::kINT64;
        CHECK(plugin->supportsFormatCombination(6, d, 7, 3));   // draft_lens int32
        CHECK(plugin->configurePlugin(d, 6, nullptr, 3) == 0);
        CHECK(plugin->configurePlugin(d, 7, nullptr, 3) == 0);
        d[4] = dyn({2}, DataType::kINT64);
        CHECK(plugin->configurePlugin(d, 6, nullptr, 3) != 0);
        CHECK(gLogger.last.find("input 'seed' dimension 0 is 2, expected 3") != std::string::npos);
        d[4] = dyn({3}, DataType::kINT64);
        d[6] = dyn({3, 1}, DataType::kINT32);
        CHECK(plugin->configurePlugin(d, 7, nullptr, 3) != 0);
        CHECK(gLogger.last.find("input 'draft_lens' must have 1 dimensions, got 2") != std::string::npos);
        d[6] = dyn({3}, DataType::kINT32);
        d[3] = dyn({3, 5, 111}, DataType::kFLOAT);  // the old per-node layout
        CHECK(plugin->configurePlugin(d, 6, nullptr, 3) != 0);
        CHECK(gLogger.last.find("input 'draft_probs' dimension 1 is 5, expected 4") != std::string::npos);
        d[3] = dyn({3, 4, 111}, DataType::kFLOAT);
        d[1] = dyn({3, 4}, DataType::kINT32);
        CHECK(plugin->configurePlugin(d, 6, nullptr, 3) != 0);
        CHECK(gLogger.last.find("input 'parents' dimension 1 is 4, expected 5") != std::string::npos);
        d[1] = dyn({3, 5}, DataType::kINT32);
        size_t const ws = plugin->getWorkspaceSize(d, 6, nullptr, 3);
        CHECK(ws >= trtspec::cuda::verifySampleWorkspaceSize(3, 111) + 255);
        PluginTensorDesc rin[7];
        for (int i = 0; i < 7; ++i) rin[i] = d[i].desc;
        std::vector<char> buffer(ws);
        int dummy[10];
        void const* inputs[7] = {&dummy[0], &dummy[1], &dummy[2], &dummy[3], &dummy[4], &dummy[5], &dummy[6]};
        void* outputs[3] = {&dummy[7], &dummy[8], &dummy[9]};
        CHECK(plugin->onShapeChange(rin, 6, nullptr, 3) == 0);
        CHECK(plugin->enqueue(rin, nullptr, inputs, outputs, buffer.data() + 8, nullptr) == 0);
        CHECK(gCall.op == "verifySample" && gCall.tokenBits == 32 && gCall.in[0] == inputs[0] &&
              gCall.in[4] == inputs[4] && gCall.in[5] == inputs[5] && gCall.in[6] == nullptr && gCall.flag &&
              gCall.batch == 3 && gCall.nodes == 4 && gCall.maxDepth == 4 && gCall.vocab == 111 &&
              reinterpret_cast<uintptr_t>(gCall.workspace) % 256 == 0 &&
              static_cast<char*>(gCall.workspace) + gCall.workspaceBytes <= buffer.data() + 8 + ws);
        rin[0].type = DataType::kINT64;
        CHECK(plugin->onShapeChange(rin, 7, nullptr, 3) == 0);
        CHECK(plugin->enqueue(rin, nullptr, inputs, outputs, buffer.data() + 8, nullptr) == 0);
        CHECK(gCall.tokenBits == 64 && gCall.in[6] == inputs[6]);
        MockBuilder b2;
        DimsExprs in[6] = {b2.dims({3, 4}), b2.dims({3, 5}), b2.dims({3, 5, 111}), b2.dims({3, 4, 111}), b2.dims({3}),
                           b2.dims({3})};
        DimsExprs out[3];
        CHECK(plugin->getOutputShapes(in, 6, nullptr, 0, out, 3, b2) == 0);
        CHECK((values(out[1]) == std::vector<int64_t>{3, 5}));  // default max_depth: L = D + 1
    }
    {  // block: [B, D], [B, D+1, V], [B, D, V], [B], [B], optional [B]; a launcher status comes back non-zero
        std::unique_ptr<IPluginV3> p(create(*std::make_unique<TrtSpecVerifyBlockCreator>(), {}));
        auto* plugin = as<TrtSpecVerifyBlockPlugin>(p.get());
        DynamicPluginTensorDesc d[6] = {dyn({3, 4}, DataType::kINT64), dyn({3, 5, 7}, DataType::kFLOAT),
                                        dyn({3, 4, 7}, DataType::kFLOAT), dyn({3}, DataType::kINT64),
                                        dyn({3}, DataType::kINT64), dyn({3}, DataType::kINT32)};
        CHECK(plugin->configurePlugin(d, 5, nullptr, 2) == 0);
        CHECK(plugin->configurePlugin(d, 6, nullptr, 2) == 0);
        d[1] = dyn({3, 4, 7}, DataType::kFLOAT);
        CHECK(plugin->configurePlugin(d, 5, nullptr, 2) != 0);
        CHECK(gLogger.last.find("input 'target_probs' dimension 1 is 4, expected 5") != std::string::npos);
        d[1] = dyn({3, 5, 7}, DataType::kFLOAT);
        d[4] = dyn({2}, DataType::kINT64);  // the old seed_offset [2]
        CHECK(plugin->configurePlugin(d, 5, nullptr, 2) != 0);
        CHECK(gLogger.last.find("input 'offset' dimension 0 is 2, expected 3") != std::string::npos);
        d[4] = dyn({3}, DataType::kINT64);
        MockBuilder b2;
        DimsExprs in[5] = {b2.dims({3, 4}), b2.dims({3, 5, 7}), b2.dims({3, 4, 7}), b2.dims({3}), b2.dims({3})};
        DimsExprs out[2];
        CHECK(plugin->getOutputShapes(in, 5, nullptr, 0, out, 2, b2) == 0);
        CHECK((values(out[0]) == std::vector<int64_t>{3}) && (values(out[1]) == std::vector<int64_t>{3}));
        PluginTensorDesc rin[6];
        for (int i = 0; i < 6; ++i) rin[i] = d[i].desc;
        int dummy[8];
        void const* inputs[6] = {&dummy[0], &dummy[1], &dummy[2], &dummy[3], &dummy[4], &dummy[5]};
        void* outputs[2] = {&dummy[6], &dummy[7]};
        CHECK(plugin->onShapeChange(rin, 6, nullptr, 2) == 0);
        CHECK(plugin->enqueue(rin, nullptr, inputs, outputs, nullptr, nullptr) ==
              static_cast<int32_t>(trtspec::Status::kInvalidToken));
        CHECK(gCall.op == "verifyBlock" && gCall.tokenBits == 64 && gCall.nodes == 4 && gCall.vocab == 7 &&
              gCall.in[3] == inputs[3] && gCall.in[4] == inputs[4] && gCall.in[5] == inputs[5]);
        CHECK(gLogger.last.find("trtspec status 3") != std::string::npos);
        rin[0].type = DataType::kINT32;
        CHECK(plugin->onShapeChange(rin, 5, nullptr, 2) == 0);
        plugin->enqueue(rin, nullptr, inputs, outputs, nullptr, nullptr);
        CHECK(gCall.tokenBits == 32 && gCall.in[5] == nullptr);
        rin[0].type = DataType::kFLOAT;  // no overload: refused before any launch
        gCall.op.clear();
        CHECK(plugin->enqueue(rin, nullptr, inputs, outputs, nullptr, nullptr) ==
              static_cast<int32_t>(trtspec::Status::kInvalidArgument));
        CHECK(gCall.op.empty());
    }
}

int main() {
    testCreators();
    testGreedy();
    testTreeMaskSampleBlock();
    if (gFailures) {
        std::fprintf(stderr, "%d check(s) failed\n", gFailures);
        return 1;
    }
    std::printf("pluginHostTest: all checks passed\n");
    return 0;
}
