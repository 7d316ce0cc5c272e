/* Preloaded beside libfaketime for the skewed-clock tests: timed waits on CLOCK_MONOTONIC that
 * libfaketime 0.9.10 does not intercept.
 *
 * libfaketime fakes clock_gettime(CLOCK_MONOTONIC) (with a relative offset it even returns the faked
 * wall-clock time there), but glibc's sem_clockwait() and pthread_cond_clockwait() hand the caller's
 * absolute deadline straight to the kernel, which compares it with the real monotonic clock. CPython
 * 3.11 waits on a lock with a timeout through sem_clockwait(CLOCK_MONOTONIC, now + timeout), so under
 * libfaketime alone every Lock.acquire(timeout=...), Condition.wait(timeout) or queue.get(timeout=...)
 * that should time out sleeps for decades instead. Here the deadline is moved from the faked clock to
 * the real one (same distance from "now" on both) before glibc sees it. Nothing else is changed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static struct timespec to_real(clockid_t clock, const struct timespec *deadline) {
    struct timespec faked, real, out;
    clock_gettime(clock, &faked);             /* libfaketime's answer */
    syscall(SYS_clock_gettime, clock, &real); /* the kernel's */
    long long ns = (long long)(deadline->tv_sec - faked.tv_sec) * 1000000000LL
                   + (deadline->tv_nsec - faked.tv_nsec);
    long long at = (long long)real.tv_sec * 1000000000LL + real.tv_nsec + (ns > 0 ? ns : 0);
    out.tv_sec = at / 1000000000LL;
    out.tv_nsec = at % 1000000000LL;
    return out;
}

int sem_clockwait(sem_t *sem, clockid_t clock, const struct timespec *deadline) {
    static int (*next)(sem_t *, clockid_t, const struct timespec *);
    if (!next) next = (int (*)(sem_t *, clockid_t, const struct timespec *))dlsym(RTLD_NEXT, "sem_clockwait");
    struct timespec real = to_real(clock, deadline);
    return next(sem, clock, &real);
}

int pthread_cond_clockwait(pthread_cond_t *cond, pthread_mutex_t *mutex, clockid_t clock,
                           const struct timespec *deadline) {
    static int (*next)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);
    if (!next)
        next = (int (*)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *))dlsym(
            RTLD_NEXT, "pthread_cond_clockwait");
    struct timespec real = to_real(clock, deadline);
    return next(cond, mutex, clock, &real);
}
