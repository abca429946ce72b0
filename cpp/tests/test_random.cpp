// trtspec::uniform equals trtspec/reference.py::uniform bit for bit (values computed by the reference).
#include <cstdio>

#include "trtspec/random.h"

static int failures = 0;
#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            ++failures;                                                       \
        }                                                                     \
    } while (0)

int main() {
    using trtspec::uniform;
    // reference.uniform(seed, offset, node, j).hex()
    CHECK(uniform(0, 0, 0, 0) == 0x1.0983a45556400p-3);
    CHECK(uniform(1, 2, 3, 4) == 0x1.1fb22a49da3e0p-2);
    CHECK(uniform(18446744073709551615ull, 9223372036854775808ull, 99, 7) == 0x1.59af45e852b38p-2);
    CHECK(uniform(123456789, 42, 0, 1000) == 0x1.a8fe0f5416338p-1);
    // range and a crude uniformity check over 100000 draws
    double sum = 0.0;
    for (uint64_t k = 0; k < 100000; ++k) {
        const double u = uniform(7, 11, 3, k);
        CHECK(u >= 0.0 && u < 1.0);
        sum += u;
    }
    CHECK(sum / 100000 > 0.495 && sum / 100000 < 0.505);
    if (failures) std::fprintf(stderr, "test_random: %d failure(s)\n", failures);
    else std::printf("test_random: ok\n");
    return failures ? 1 : 0;
}
