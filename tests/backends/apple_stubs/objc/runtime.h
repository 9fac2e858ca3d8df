// Declaration stub for the syntax check of src/metal on Linux (tests/backends/test_metal_host_source.py):
// only what metal-cpp uses, declared as Apple's SDK declares it. Not Apple's header; nothing links against it.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct objc_class* Class;
struct objc_object {
  Class isa;
};
typedef struct objc_object* id;
typedef struct objc_selector* SEL;

extern "C" {
Class objc_lookUpClass(const char* name);
void* objc_getProtocol(const char* name);
SEL sel_registerName(const char* str);
}
