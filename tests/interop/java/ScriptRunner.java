// Kafka's scripts (the main classes behind kafka-topics.sh, kafka-configs.sh...) run one
// after the other in this one JVM, as the scripts would run them each in a JVM of its own.
//
// Usage: java -cp <this dir>:<Kafka's jars> ScriptRunner COMMANDS_FILE
//
// COMMANDS_FILE ("-": standard input, each command run as its line comes, so
// that a caller can choose the next commands from the outcomes of the first
// ones, in the same JVM) holds one command per line: the main class and its arguments,
// separated by tabs; an argument "--stdin-base64=..." is not passed on but is the
// command's standard input. For each command one JSON line is printed:
// {"index", "exit", "out", "err", "ms"}: the exit status the script asked for (through
// Kafka's Exit, which is made to throw rather than end the JVM; 0 when main
// returned), what it wrote on standard output and standard error, and how long it
// took (milliseconds, for finding where a test's time goes).
//
// Rules: each command gets fresh System.in/out/err buffers; the client's logs
// (log4j) keep the JVM's own standard error; a command has a deadline
// (DEADLINE_S), past which it is reported with exit "timeout" and the next runs.

import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.common.utils.internals.Exit;

public final class ScriptRunner {
    static final long DEADLINE_S = 90;

    /** The first exit status the running command asked for (null: none yet), and
     * how much it had written by then: what the process would have printed. */
    static volatile Integer firstExit;
    static volatile int outMark;
    static volatile int errMark;
    static volatile ByteArrayOutputStream currentOut;
    static volatile ByteArrayOutputStream currentErr;
    /** The shutdown hooks the command registered (through Kafka's Exit), run when it ends. */
    static final List<Runnable> hooks = new ArrayList<>();

    static synchronized void exitCalled(int status) {
        if (firstExit == null) {
            System.out.flush();
            System.err.flush();
            firstExit = status;
            outMark = currentOut.size();
            errMark = currentErr.size();
        }
        throw new ExitCalled(status);
    }

    /** What Kafka's Exit.exit throws here instead of ending the JVM. */
    static final class ExitCalled extends RuntimeException {
        final int status;

        ExitCalled(int status) {
            super("exit " + status);
            this.status = status;
        }
    }

    static String json(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                sb.append('\\').append(ch);
            } else if (ch < 0x20) {
                sb.append(String.format("\\u%04x", (int) ch));
            } else {
                sb.append(ch);
            }
        }
        return sb.append('"').toString();
    }

    static int exitOf(Throwable t) {
        while (t != null) {
            if (t instanceof ExitCalled) {
                return ((ExitCalled) t).status;
            }
            t = t.getCause();
        }
        return Integer.MIN_VALUE;
    }

    public static void main(String[] args) throws Exception {
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        InputStream realIn = System.in;
        Exit.setExitProcedure((status, message) -> exitCalled(status));
        Exit.setHaltProcedure((status, message) -> exitCalled(status));
        Exit.setShutdownHookAdder((name, hook) -> {
            synchronized (hooks) {
                hooks.add(hook);
            }
        });
        BufferedReader commands = args[0].equals("-")
                ? new BufferedReader(new InputStreamReader(realIn, StandardCharsets.UTF_8))
                : Files.newBufferedReader(Paths.get(args[0]), StandardCharsets.UTF_8);
        int index = 0;
        String line;
        while ((line = commands.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] parts = line.split("\t", -1);
            String mainClass = parts[0];
            List<String> argv = new ArrayList<>();
            byte[] stdin = new byte[0];
            for (int i = 1; i < parts.length; i++) {
                if (parts[i].startsWith("--stdin-base64=")) {
                    stdin = Base64.getDecoder().decode(parts[i].substring("--stdin-base64=".length()));
                } else {
                    argv.add(parts[i]);
                }
            }
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            currentOut = out;
            currentErr = err;
            firstExit = null;
            System.setIn(new ByteArrayInputStream(stdin));
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            String exit;
            long started = System.nanoTime();
            ExecutorService one = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "script");
                t.setDaemon(true);
                return t;
            });
            try {
                Method main = Class.forName(mainClass).getMethod("main", String[].class);
                Future<?> run = one.submit(() -> {
                    main.invoke(null, (Object) argv.toArray(new String[0]));
                    return null;
                });
                run.get(DEADLINE_S, TimeUnit.SECONDS);
                exit = "0";
            } catch (ExecutionException e) {
                Throwable cause = e.getCause() instanceof InvocationTargetException
                        ? e.getCause().getCause() : e.getCause();
                int status = exitOf(cause);
                if (status == Integer.MIN_VALUE) {
                    exit = "\"exception\"";
                    cause.printStackTrace(System.err);
                } else {
                    exit = Integer.toString(status);
                }
            } catch (TimeoutException e) {
                exit = "\"timeout\"";
            } finally {
                // as the JVM would when the script ends: its shutdown hooks
                List<Runnable> registered;
                synchronized (hooks) {
                    registered = new ArrayList<>(hooks);
                    hooks.clear();
                }
                for (Runnable hook : registered) {
                    try {
                        hook.run();
                    } catch (RuntimeException e) {
                        e.printStackTrace(System.err);
                    }
                }
                one.shutdownNow();
                System.out.flush();
                System.err.flush();
                System.setIn(realIn);
                System.setOut(realOut);
                System.setErr(realErr);
            }
            byte[] outBytes = out.toByteArray();
            byte[] errBytes = err.toByteArray();
            if (firstExit != null) {
                // what was printed up to the exit (then the hooks' output, as the JVM
                // runs them after), not what the tool did after the exit threw
                exit = Integer.toString(firstExit);
                errBytes = java.util.Arrays.copyOf(errBytes, errMark);
            }
            realOut.println("{\"index\":" + index + ",\"exit\":" + exit
                    + ",\"out\":" + json(new String(outBytes, StandardCharsets.UTF_8))
                    + ",\"err\":" + json(new String(errBytes, StandardCharsets.UTF_8))
                    + ",\"ms\":" + (System.nanoTime() - started) / 1_000_000 + "}");
            realOut.flush();
            index++;
        }
        Exit.resetExitProcedure();
        System.exit(0);
    }
}
