// Declaration stub for the syntax check of src/metal on Linux (tests/backends/test_metal_host_source.py):
// only what metal-cpp uses, declared as Apple's SDK declares it. Not Apple's header; nothing links against it.
#pragma once

#define TARGET_OS_OSX 1
