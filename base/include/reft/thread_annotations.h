#pragma once
/// \file thread_annotations.h
/// \brief Clang thread-safety annotations (no-ops for other compilers).
///
/// State guarded by a reft::Mutex is declared `REFT_GUARDED_BY(mu_)`, and a function that must
/// be called with the mutex held (by convention its name ends in `Locked`) `REFT_REQUIRES(mu_)`.
/// Clang's -Wthread-safety then proves at compile time that every access holds the lock; the
/// ctest `thread_safety` compiles the annotated code with clang and -Werror=thread-safety.

#if defined(__clang__)
#define REFT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define REFT_THREAD_ANNOTATION(x)
#endif

/// A type that is a lock (reft::Mutex).
#define REFT_CAPABILITY(name) REFT_THREAD_ANNOTATION(capability(name))
/// An RAII type that holds a lock for its lifetime (reft::MutexLock).
#define REFT_SCOPED_CAPABILITY REFT_THREAD_ANNOTATION(scoped_lockable)
/// Data that may only be read or written with the lock held.
#define REFT_GUARDED_BY(mu) REFT_THREAD_ANNOTATION(guarded_by(mu))
/// A pointer whose pointee may only be accessed with the lock held.
#define REFT_PT_GUARDED_BY(mu) REFT_THREAD_ANNOTATION(pt_guarded_by(mu))
/// The caller must hold the lock(s).
#define REFT_REQUIRES(...) REFT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
/// The caller must not hold the lock(s) (the function takes them itself).
#define REFT_EXCLUDES(...) REFT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
/// The function takes the lock(s) and returns with them held.
#define REFT_ACQUIRE(...) REFT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
/// The function releases the lock(s) the caller held.
#define REFT_RELEASE(...) REFT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
/// The function takes the lock when it returns `result`.
#define REFT_TRY_ACQUIRE(...) REFT_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
/// The function returns a reference to the lock `mu`.
#define REFT_RETURN_CAPABILITY(mu) REFT_THREAD_ANNOTATION(lock_returned(mu))
/// Turns the analysis off for one function. Only for code the analysis cannot follow (a
/// condition-variable wait), with a comment saying why.
#define REFT_NO_THREAD_SAFETY_ANALYSIS REFT_THREAD_ANNOTATION(no_thread_safety_analysis)
