/* dlopen(path, flags): rewrite a driver name (dlopen_hook.cpp), then tail-jump to libc's dlopen
   with the caller's return address intact. */
#if defined(__x86_64__)
  .section .note.GNU-stack,"",@progbits
  .text
  .globl dlopen
  .type dlopen,@function
  .balign 16
dlopen:
  .cfi_startproc
  pushq %rsi                 /* flags; also aligns the stack for the calls */
  .cfi_adjust_cfa_offset 8
  call gcr_dlopen_name       /* %rdi = path -> %rax = path to use */
  pushq %rax
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp              /* keep the stack 16-byte aligned at the call */
  .cfi_adjust_cfa_offset 8
  call gcr_libc_dlopen_address
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  movq %rax, %r11
  popq %rdi
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  testq %r11, %r11
  jz 1f
  jmp *%r11
1:
  xorl %eax, %eax
  ret
  .cfi_endproc
  .size dlopen, .-dlopen
#elif defined(__aarch64__)
/* The caller's return address is in x30 (lr): saved across the two calls and restored before the
   jump, so that libc's dlopen reads the program's call site from it. */
  .section .note.GNU-stack,"",%progbits
  .text
  .globl dlopen
  .type dlopen,%function
  .balign 16
dlopen:
  .cfi_startproc
  stp x29, x30, [sp, #-32]!
  .cfi_def_cfa_offset 32
  .cfi_offset x29, -32
  .cfi_offset x30, -24
  mov x29, sp
  str x1, [sp, #16]          /* flags */
  bl gcr_dlopen_name         /* x0 = path -> x0 = path to use */
  str x0, [sp, #24]
  bl gcr_libc_dlopen_address
  mov x16, x0
  ldr x0, [sp, #24]
  ldr x1, [sp, #16]
  ldp x29, x30, [sp], #32
  .cfi_restore x29
  .cfi_restore x30
  .cfi_def_cfa_offset 0
  cbz x16, 1f
  br x16
1:
  mov x0, #0
  ret
  .cfi_endproc
  .size dlopen, .-dlopen
#else
#error "interpose/dlopen_stub.S: no dlopen stub for this architecture (x86-64 and aarch64 only)"
#endif
