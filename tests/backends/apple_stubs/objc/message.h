// Declaration stub for the syntax check of src/metal on Linux (tests/backends/test_metal_host_source.py):
// only what metal-cpp uses, declared as Apple's SDK declares it. Not Apple's header; nothing links against it.
#pragma once
#include <objc/runtime.h>

extern "C" {
void objc_msgSend(void);
void objc_msgSend_fpret(void);  // (x86-64 only in Apple's runtime; metal-cpp names them there)
void objc_msgSend_stret(void);
}
