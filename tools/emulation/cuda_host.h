// smallinit.tools.emulation — the CUDA kernels of smallinit.kernels, compiled unmodified by a
// host C++ compiler and run on the CPU, to check their arithmetic without a GPU.
//
// Execution model. A launch runs its blocks one after another on the calling thread; the
// threads of a block are fibers (ucontext), one stack each, scheduled deterministically:
// the lowest-numbered runnable thread runs until it reaches a barrier, a warp shuffle or
// its end (order = 1: the highest-numbered first). So a thread runs as far ahead of the
// others as the code lets it, and a missing __syncthreads shows up as wrong values on every
// run, not now and then.
//  * __shared__ is thread_local: all fibers of a block share one host thread, so they share
//    it, and nothing else does. Before each block every __shared__ byte of the module
//    (static arrays and the dynamic `extern __shared__` array alike) is set to 0xFF (a NaN
//    in float and double), so reading shared memory before writing it gives NaN.
//  * __syncthreads(): every thread that has not returned must arrive, at the same call
//    site (a barrier reached from two sites is an error); threads that returned count as
//    arrived, as on the hardware.
//  * __shfl_*_sync(mask, v, ...): every lane named in mask must arrive with the same mask
//    and the same call; a lane that names a lane that does not exist, has returned or is
//    waiting elsewhere (a deadlock) aborts the launch, as does reading an inactive lane.
//  * atomics: a fiber is never preempted, so an atomic is a plain read-modify-write.
// Errors (a deadlock, a divergent barrier, a bad mask, a launch beyond the limits) abort
// the launch: the remaining fibers are dropped and emu_launch returns 1 with a message.
// Under AddressSanitizer the fiber switches are announced to it, and the bytes of the
// dynamic shared array past the launch's size are poisoned.
#pragma once

#include <dlfcn.h>
#include <link.h>
#include <math.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

// ----------------------------------------------------------------------------- CUDA syntax
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ thread_local
#define __constant__ const
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define warpSize 32

// float overloads of the math functions in the global namespace, as in CUDA device code
static_assert(std::is_same<decltype(::tanh(1.0f)), float>::value, "float tanh");
static_assert(std::is_same<decltype(::sqrt(1.0f)), float>::value, "float sqrt");

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace emu {

enum State { RUNNABLE, AT_BARRIER, AT_WARP, DONE };
enum ShflKind { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR };

struct Fiber {
    ucontext_t ctx;
    char* stack = nullptr;
    uint3 tid{0, 0, 0};
    int lane = 0, warp = 0;
    State state = DONE;
    const char* file = nullptr;  // call site of the barrier or shuffle it waits at
    int line = 0;
    unsigned mask = 0;
    int kind = 0, arg = 0, width = 32;
    unsigned char value[8] = {0}, result[8] = {0};
    void* fake_stack = nullptr;
};

constexpr std::size_t kStack = EMU_ASAN ? (512u << 10) : (128u << 10);
constexpr std::size_t kStackUsed = 64u << 10;  // more than any kernel's frames need
constexpr std::size_t kDynamicSharedMax = 48u << 10;  // the dynamic shared array's bytes

// state of the launch in progress (one at a time: the launch mutex)
inline std::vector<Fiber> g_fibers;
inline Fiber* g_cur = nullptr;
inline ucontext_t g_sched;
inline uint3 g_block_idx{0, 0, 0};
inline dim3 g_block_dim, g_grid_dim;
inline std::string g_error;
inline void (*g_invoke)(void*, void**) = nullptr;
inline void* g_kernel = nullptr;
inline void** g_args = nullptr;
inline const void* g_sched_bottom = nullptr;
inline std::size_t g_sched_size = 0;
inline void* g_sched_fake = nullptr;

inline const uint3& thread_idx() { return g_cur->tid; }

[[noreturn]] inline void die(const char* what) {
    std::fprintf(stderr, "cuda emulation: %s\n", what);
    std::abort();
}

// fiber -> scheduler; returns when the scheduler resumes this fiber
inline void yield_to_scheduler(bool final_switch = false) {
    Fiber* f = g_cur;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(final_switch ? nullptr : &f->fake_stack, g_sched_bottom,
                                   g_sched_size);
#else
    (void)final_switch;
#endif
    swapcontext(&f->ctx, &g_sched);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(f->fake_stack, &g_sched_bottom, &g_sched_size);
#endif
}

inline void fiber_main() {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_sched_bottom, &g_sched_size);
#endif
    g_invoke(g_kernel, g_args);
    g_cur->state = DONE;
    yield_to_scheduler(true);
    die("a finished thread was resumed");
}

inline void syncthreads(const char* file, int line) {
    g_cur->state = AT_BARRIER;
    g_cur->file = file;
    g_cur->line = line;
    yield_to_scheduler();
}

template <typename T>
inline T shfl(int kind, unsigned mask, T v, int arg, int width, const char* file, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffled type");
    Fiber* f = g_cur;
    f->state = AT_WARP;
    f->mask = mask;
    f->kind = kind;
    f->arg = arg;
    f->width = width;
    f->file = file;
    f->line = line;
    std::memset(f->value, 0, 8);
    std::memcpy(f->value, &v, sizeof(T));
    yield_to_scheduler();
    T out;
    std::memcpy(&out, g_cur->result, sizeof(T));
    return out;
}

}  // namespace emu

#define threadIdx (::emu::thread_idx())
#define blockIdx (static_cast<const uint3&>(::emu::g_block_idx))
#define blockDim (static_cast<const dim3&>(::emu::g_block_dim))
#define gridDim (static_cast<const dim3&>(::emu::g_grid_dim))
#define __syncthreads() ::emu::syncthreads(__FILE__, __LINE__)
#define __shfl_sync(m, v, lane, ...) \
    ::emu::shfl(::emu::SHFL_IDX, (m), (v), (lane), ::emu::width_of(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_up_sync(m, v, d, ...) \
    ::emu::shfl(::emu::SHFL_UP, (m), (v), (d), ::emu::width_of(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_down_sync(m, v, d, ...) \
    ::emu::shfl(::emu::SHFL_DOWN, (m), (v), (d), ::emu::width_of(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_xor_sync(m, v, d, ...) \
    ::emu::shfl(::emu::SHFL_XOR, (m), (v), (d), ::emu::width_of(__VA_ARGS__), __FILE__, __LINE__)

namespace emu {
inline int width_of() { return 32; }
inline int width_of(int w) { return w; }
}  // namespace emu

template <typename T> inline T atomicAdd(T* p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> inline T atomicMax(T* p, T v) {
    T old = *p;
    *p = old < v ? v : old;
    return old;
}
template <typename T> inline T atomicMin(T* p, T v) {
    T old = *p;
    *p = v < old ? v : old;
    return old;
}
inline float __uint_as_float(unsigned int u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    std::memcpy(&u, &f, 4);
    return u;
}

// ----------------------------------------------------------------------------- scheduler
namespace emu {

struct DynamicShared {
    unsigned char* (*address)();  // this thread's instance of the array
};
inline std::vector<DynamicShared>& dynamic_arrays() {
    static std::vector<DynamicShared> arrays;
    return arrays;
}
struct RegisterDynamicShared {
    explicit RegisterDynamicShared(unsigned char* (*address)()) {
        dynamic_arrays().push_back({address});
    }
};

// this module's thread-local block (its __shared__ variables) on the calling thread
struct TlsBlock {
    void* data = nullptr;
    std::size_t size = 0;
};
inline int tls_of_module(dl_phdr_info* info, std::size_t, void* out) {
    Dl_info self;
    if (!dladdr(reinterpret_cast<void*>(&tls_of_module), &self)) return 0;
    if (reinterpret_cast<void*>(info->dlpi_addr) != self.dli_fbase) return 0;
    for (int i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_TLS) {
            auto* block = static_cast<TlsBlock*>(out);
            block->data = info->dlpi_tls_data;
            block->size = info->dlpi_phdr[i].p_memsz;
        }
    return 1;
}

// touching it makes the calling thread allocate the module's thread-local block
inline thread_local volatile unsigned char g_tls_anchor = 0;

inline TlsBlock shared_storage() {
    g_tls_anchor = 0;
    TlsBlock block;
    dl_iterate_phdr(tls_of_module, &block);
    return block;
}

inline void fill_shared_with_garbage(const TlsBlock& block, std::size_t dynamic_bytes) {
#if EMU_ASAN
    for (auto& arr : dynamic_arrays()) ASAN_UNPOISON_MEMORY_REGION(arr.address(), kDynamicSharedMax);
#endif
    std::memset(block.data, 0xFF, block.size);
#if EMU_ASAN
    for (auto& arr : dynamic_arrays())
        ASAN_POISON_MEMORY_REGION(arr.address() + dynamic_bytes, kDynamicSharedMax - dynamic_bytes);
#else
    (void)dynamic_bytes;
#endif
}

inline std::string where(const Fiber& f) {
    return std::string(f.file ? f.file : "?") + ":" + std::to_string(f.line);
}

inline std::string describe(const Fiber& f) {
    static const char* names[] = {"runnable", "at __syncthreads", "at a warp shuffle",
                                  "returned"};
    std::string s = "thread " + std::to_string(&f - g_fibers.data()) + " " + names[f.state];
    if (f.state == AT_BARRIER || f.state == AT_WARP) s += " (" + where(f) + ")";
    return s;
}

inline void fail(const std::string& message) {
    if (g_error.empty())
        g_error = message + " [block (" + std::to_string(g_block_idx.x) + "," +
                  std::to_string(g_block_idx.y) + "," + std::to_string(g_block_idx.z) + ")]";
}

// all threads at the barrier: check they reached the same one and release them
inline void try_release_barrier(int n) {
    const Fiber* first = nullptr;
    for (int i = 0; i < n; ++i) {
        const Fiber& f = g_fibers[i];
        if (f.state == DONE) continue;
        if (f.state != AT_BARRIER) return;
        if (!first) first = &f;
        else if (f.line != first->line || std::strcmp(f.file, first->file) != 0)
            return fail("divergent __syncthreads: " + describe(*first) + ", " + describe(f));
    }
    for (int i = 0; i < n; ++i)
        if (g_fibers[i].state == AT_BARRIER) g_fibers[i].state = RUNNABLE;
}

// a lane of warp w arrived at a shuffle (or returned): complete the shuffle when it can
inline void try_complete_shuffle(int n, int w) {
    const int base = 32 * w, lanes = n - base < 32 ? n - base : 32;
    const Fiber* ref = nullptr;
    for (int l = 0; l < lanes; ++l) {
        const Fiber& f = g_fibers[base + l];
        if (f.state != AT_WARP) continue;
        if (!(f.mask >> l & 1u))
            return fail(describe(f) + ": its own lane is not in the mask");
        if (lanes < 32 && (f.mask >> lanes))
            return fail(describe(f) + ": the mask names lanes past the block's last thread");
        if (!ref) ref = &f;
        else if (f.mask != ref->mask || f.kind != ref->kind || f.line != ref->line ||
                 std::strcmp(f.file, ref->file) != 0)
            return fail("warp shuffles that do not match: " + describe(*ref) + " mask " +
                        std::to_string(ref->mask) + ", " + describe(f) + " mask " +
                        std::to_string(f.mask));
    }
    if (!ref) return;
    for (int l = 0; l < lanes; ++l) {
        const Fiber& f = g_fibers[base + l];
        if (!(ref->mask >> l & 1u)) continue;
        if (f.state == DONE)
            return fail(describe(*ref) + ": the mask names lane " + std::to_string(l) +
                        ", which has returned");
        if (f.state != AT_WARP) return;  // not there yet
    }
    for (int l = 0; l < lanes; ++l) {
        Fiber& f = g_fibers[base + l];
        if (!(ref->mask >> l & 1u)) continue;
        const int width = f.width, seg = l - l % width, pos = l % width;
        int src = l;
        switch (f.kind) {
            case SHFL_IDX: src = seg + ((f.arg % width) + width) % width; break;
            case SHFL_UP: src = pos - f.arg >= 0 ? l - f.arg : l; break;
            case SHFL_DOWN: src = pos + f.arg < width ? l + f.arg : l; break;
            default: src = ((l ^ f.arg) < seg + width && (l ^ f.arg) < 32) ? (l ^ f.arg) : l;
        }
        if (!(ref->mask >> src & 1u))
            return fail(describe(f) + " reads lane " + std::to_string(src) +
                        ", which is not in the mask");
        std::memcpy(f.result, g_fibers[base + src].value, 8);
    }
    for (int l = 0; l < lanes; ++l)
        if (ref->mask >> l & 1u) g_fibers[base + l].state = RUNNABLE;
}

inline void run_block(int n, int order) {
    for (int i = 0; i < n; ++i) {
        Fiber& f = g_fibers[i];
        const unsigned x = i % g_block_dim.x, y = (i / g_block_dim.x) % g_block_dim.y,
                       z = i / (g_block_dim.x * g_block_dim.y);
        f.tid = {x, y, z};
        f.lane = i % 32;
        f.warp = i / 32;
        f.state = RUNNABLE;
        f.fake_stack = nullptr;
#if EMU_ASAN  // frames left by the previous block (the top of the stack is where they were)
        ASAN_UNPOISON_MEMORY_REGION(f.stack + kStack - kStackUsed, kStackUsed);
#endif
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = kStack;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
    }
    while (g_error.empty()) {
        int next = -1;
        for (int k = 0; k < n; ++k) {
            const int i = order ? n - 1 - k : k;
            if (g_fibers[i].state == RUNNABLE) {
                next = i;
                break;
            }
        }
        if (next < 0) {
            bool all_done = true;
            std::string states;
            for (int i = 0; i < n; ++i)
                if (g_fibers[i].state != DONE) {
                    all_done = false;
                    if (states.size() < 400) states += "; " + describe(g_fibers[i]);
                }
            if (!all_done) fail("deadlock: no thread can run" + states);
            return;
        }
        g_cur = &g_fibers[next];
#if EMU_ASAN
        __sanitizer_start_switch_fiber(&g_sched_fake, g_cur->stack, kStack);
#endif
        swapcontext(&g_sched, &g_cur->ctx);
#if EMU_ASAN
        __sanitizer_finish_switch_fiber(g_sched_fake, nullptr, nullptr);
#endif
        const Fiber& f = *g_cur;
        if (f.state == AT_WARP || f.state == DONE) try_complete_shuffle(n, f.warp);
        if (f.state == AT_BARRIER || f.state == DONE) try_release_barrier(n);
    }
}

// ----------------------------------------------------------------------------- entries
// type code of a kernel parameter, as NumPy spells the dtype: kind + bytes ("f4", "i8",
// "u2"), "*" after a pointer's element, "c" before a pointer to const
template <typename T> std::string code_of() {
    if constexpr (std::is_pointer<T>::value) {
        using E = typename std::remove_pointer<T>::type;
        return (std::is_const<E>::value ? "c" : "") + code_of<std::remove_cv_t<E>>() + "*";
    } else {
        static_assert(std::is_arithmetic<T>::value, "kernel parameters: numbers or pointers");
        const char kind = std::is_floating_point<T>::value ? 'f'
                          : std::is_signed<T>::value       ? 'i'
                                                           : 'u';
        return std::string(1, kind) + std::to_string(sizeof(T));
    }
}

template <typename... P, std::size_t... I>
void call(void (*k)(P...), void** args, std::index_sequence<I...>) {
    k(*static_cast<std::remove_cv_t<P>*>(args[I])...);
}
template <typename... P> void invoke(void* k, void** args) {
    call(reinterpret_cast<void (*)(P...)>(k), args, std::index_sequence_for<P...>{});
}

struct Entry {
    const char* name;
    std::string signature;
    void (*invoke)(void*, void**);
    void* kernel;
};
template <typename... P> Entry entry(const char* name, void (*k)(P...)) {
    std::string sig;
    ((sig += (sig.empty() ? "" : ",") + code_of<P>()), ...);
    return Entry{name, sig, &invoke<P...>, reinterpret_cast<void*>(k)};
}

inline std::vector<Entry>& entries() {
    static std::vector<Entry> all;
    return all;
}
struct Register {
    explicit Register(std::initializer_list<Entry> list) {
        for (const auto& e : list) entries().push_back(e);
    }
};

inline const Entry* find(const char* name) {
    for (const auto& e : entries())
        if (std::strcmp(e.name, name) == 0) return &e;
    return nullptr;
}

inline std::mutex g_launch_mutex;

inline int launch(const char* name, const unsigned grid[3], const unsigned block[3],
                  std::size_t shared_bytes, void** args, int order, char* err,
                  std::size_t errlen) {
    std::lock_guard<std::mutex> lock(g_launch_mutex);
    g_error.clear();
    const Entry* e = find(name);
    const unsigned long long threads = 1ull * block[0] * block[1] * block[2];
    if (!e) g_error = std::string("no kernel ") + name;
    else if (threads == 0 || threads > 1024 || block[2] > 64)
        g_error = "block (" + std::to_string(block[0]) + "," + std::to_string(block[1]) + "," +
                  std::to_string(block[2]) + ") is not a valid CUDA block";
    else if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || grid[0] > 2147483647u ||
             grid[1] > 65535 || grid[2] > 65535)
        g_error = "grid (" + std::to_string(grid[0]) + "," + std::to_string(grid[1]) + "," +
                  std::to_string(grid[2]) + ") is not a valid CUDA grid";
    else if (shared_bytes > kDynamicSharedMax)
        g_error = "dynamic shared memory of " + std::to_string(shared_bytes) +
                  " bytes exceeds the 48 KiB a launch gets without opting in";
    if (g_error.empty()) {
        const int n = static_cast<int>(threads);
        if (static_cast<int>(g_fibers.size()) < n) {
            const std::size_t have = g_fibers.size();
            g_fibers.resize(n);
            for (std::size_t i = have; i < g_fibers.size(); ++i) {
                void* mem = mmap(nullptr, kStack, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
                if (mem == MAP_FAILED) die("cannot map a fiber stack");
                mprotect(mem, 4096, PROT_NONE);  // guard page at the stack's end
                g_fibers[i].stack = static_cast<char*>(mem);
            }
        }
        g_block_dim = dim3(block[0], block[1], block[2]);
        g_grid_dim = dim3(grid[0], grid[1], grid[2]);
        g_invoke = e->invoke;
        g_kernel = e->kernel;
        g_args = args;
        const TlsBlock shared = shared_storage();
        if (!shared.data) g_error = "cannot find this thread's shared-memory (TLS) block";
        for (unsigned z = 0; z < grid[2] && g_error.empty(); ++z)
            for (unsigned y = 0; y < grid[1] && g_error.empty(); ++y)
                for (unsigned x = 0; x < grid[0] && g_error.empty(); ++x) {
                    g_block_idx = {x, y, z};
                    fill_shared_with_garbage(shared, shared_bytes);
                    run_block(n, order);
                }
    }
    g_cur = nullptr;
    std::snprintf(err, errlen, "%s", g_error.c_str());
    return g_error.empty() ? 0 : 1;
}

}  // namespace emu

#define EMU_API __attribute__((visibility("default")))

// the launcher's C interface (tools/emulation/__init__.py loads it with ctypes)
#define EMU_EXPORTS                                                                          \
    extern "C" EMU_API int emu_launch(const char* name, const unsigned* grid, const unsigned* block,  \
                              unsigned long long shared_bytes, void** args, int order,        \
                              char* err, unsigned long long errlen) {                         \
        return ::emu::launch(name, grid, block, shared_bytes, args, order, err, errlen);      \
    }                                                                                         \
    extern "C" EMU_API const char* emu_signature(const char* name) {                                  \
        const ::emu::Entry* e = ::emu::find(name);                                            \
        return e ? e->signature.c_str() : nullptr;                                            \
    }                                                                                         \
    extern "C" EMU_API unsigned long long emu_shared_bytes() {                                        \
        ::emu::TlsBlock block;                                                                \
        dl_iterate_phdr(::emu::tls_of_module, &block);                                        \
        return block.size;                                                                    \
    }
