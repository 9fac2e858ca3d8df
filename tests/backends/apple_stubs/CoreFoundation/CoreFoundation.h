// Declaration stub for the syntax check of src/metal on Linux (tests/backends/test_metal_host_source.py):
// only what metal-cpp uses, declared as Apple's SDK declares it. Not Apple's header; nothing links against it.
#pragma once
#include <math.h>  // (CoreFoundation.h includes it: metal-cpp's INFINITY comes from there)

typedef double CFTimeInterval;
